"""``/api/presets`` and ``/api/shares`` on the gateway app, in process (no workers, no models)."""

from __future__ import annotations

import json
import logging
import os

import pytest
from fastapi.testclient import TestClient

from core.config import AppConfig
from gateway.app import create_app
from gateway.site.presets import BUILTIN_PRESETS

TINY_JPEG = "data:image/jpeg;base64,/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHR8e"


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def client(data_dir):
    data_dir.mkdir()
    config = AppConfig.model_validate({"data_dir": str(data_dir), "workers": {"count": 0},
                                       "gateway": {"allowed_hosts": ["testserver"]}})  # TestClient's Host
    with TestClient(create_app(config)) as c:
        yield c


def conversation(n: int = 2) -> dict:
    msgs = []
    for i in range(n):
        msgs.append({"role": "user", "text": f"question {i}", "at": "2025-01-02T03:04:05.000Z"})
        msgs.append({"role": "assistant", "text": f"answer {i}", "at": "2025-01-02T03:04:06.000Z"})
    return {"title": "Chat", "messages": msgs}


# ------------------------------------------------------------------ presets


def test_builtin_presets(client):
    r = client.get("/api/presets")
    assert r.status_code == 200
    body = r.json()
    assert body["source"] == "builtin"
    names = [p["name"] for p in body["presets"]]
    assert {"Helpful assistant", "Concise", "Tutor"} <= set(names)
    assert len(body["presets"]) == len(BUILTIN_PRESETS)
    for p in body["presets"]:
        assert set(p) == {"id", "name", "instructions", "voice", "temperature", "max_output_tokens", "output_audio"}


def test_presets_file_overrides_builtins(client, data_dir):
    (data_dir / "presets.json").write_text(json.dumps({"presets": [
        {"id": "pirate", "name": "Pirate", "instructions": "Talk like a pirate.", "temperature": 0.9,
         "max_output_tokens": 80, "output_audio": False},
    ]}))
    body = client.get("/api/presets").json()
    assert body["source"] == "file"
    assert [p["id"] for p in body["presets"]] == ["pirate"]
    assert body["presets"][0]["voice"] == "joe" and body["presets"][0]["output_audio"] is False
    # A bare list works too, and an edit is picked up without a restart.
    (data_dir / "presets.json").write_text(json.dumps([{"id": "a", "name": "A"}, {"id": "b", "name": "B"}]))
    os.utime(data_dir / "presets.json", ns=(1, 1))  # a distinct mtime even on coarse clocks
    assert [p["id"] for p in client.get("/api/presets").json()["presets"]] == ["a", "b"]


@pytest.mark.parametrize("content, reason", [
    ("{not json", "not valid JSON"),
    (json.dumps([{"id": "x", "name": "X", "temperature": 9}]), "temperature"),
    (json.dumps([{"id": "x", "name": "X"}, {"id": "x", "name": "Y"}]), "duplicate preset ids"),
    (json.dumps([{"id": "x", "name": "X", "colour": "red"}]), "colour"),
    (json.dumps([]), "presets"),
])
def test_invalid_presets_file_keeps_builtins(client, data_dir, caplog, content, reason):
    (data_dir / "presets.json").write_text(content)
    with caplog.at_level(logging.ERROR, logger="gateway.site.presets"):
        body = client.get("/api/presets").json()
    assert body["source"] == "builtin"
    assert [p["id"] for p in body["presets"]] == [p.id for p in BUILTIN_PRESETS]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "presets.json" in logged and reason in logged, logged


# ------------------------------------------------------------------ shares


def test_share_round_trip(client, data_dir):
    conv = conversation()
    conv["messages"][0]["image"] = TINY_JPEG
    r = client.post("/api/shares", json=conv)
    assert r.status_code == 201, r.text
    created = r.json()
    share_id = created["id"]
    assert len(share_id) == 22 and created["url"] == f"/turnbased.html?share={share_id}"
    stored = data_dir / "shares" / f"{share_id}.json"
    assert stored.is_file()
    assert not [p for p in stored.parent.iterdir() if p.name.startswith(".tmp")]  # no temp file left

    got = client.get(f"/api/shares/{share_id}")
    assert got.status_code == 200
    body = got.json()
    assert body["id"] == share_id and body["created_at"]
    assert [(m["role"], m["text"]) for m in body["messages"]] == [(m["role"], m["text"]) for m in conv["messages"]]
    assert body["messages"][0]["image"] == TINY_JPEG
    # Two shares of the same chat get different unguessable ids.
    assert client.post("/api/shares", json=conv).json()["id"] != share_id


@pytest.mark.parametrize("share_id", [
    "AAAAAAAAAAAAAAAAAAAAAA",  # well-formed, never created
    "..%2f..%2fetc",
    "..%2F..%2Fetc%2Fpasswd",
    "%2e%2e",
    "..",
    "short",
])
def test_share_unknown_or_traversal_is_404(client, data_dir, share_id):
    (data_dir / "etc.json").write_text("{}")  # something a traversal could reach
    assert client.get(f"/api/shares/{share_id}").status_code == 404


def test_share_too_large_is_413(client, data_dir):
    conv = {"messages": [{"role": "user", "text": "x" * 19_000} for _ in range(60)]}
    r = client.post("/api/shares", json=conv)
    assert r.status_code == 413
    assert "limit" in r.json()["detail"]
    assert not (data_dir / "shares").exists() or not list((data_dir / "shares").iterdir())


@pytest.mark.parametrize("body", [
    b"not json",
    json.dumps({"messages": []}).encode(),
    json.dumps({"messages": [{"role": "system", "text": "hi"}]}).encode(),
    json.dumps({"messages": [{"role": "user", "text": ""}]}).encode(),
    json.dumps({"messages": [{"role": "user", "text": "hi", "image": "javascript:alert(1)"}]}).encode(),
    json.dumps({"messages": [{"role": "user", "text": "hi", "extra": 1}]}).encode(),
    json.dumps([1, 2]).encode(),
])
def test_share_bad_body_is_422(client, body):
    r = client.post("/api/shares", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert isinstance(r.json()["detail"], list)
