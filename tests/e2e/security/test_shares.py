"""Issue 32 item 2: shares are no longer open and forever.

With ``auth.api_keys`` set, creating a share needs a key (or the admin token); creations are rate
limited per client; a share expires (default and most ``shares.expiry_days``, less per share);
whoever holds its delete token (returned at creation) or the admin can delete it; cleanup deletes
expired shares and counts shares in ``recording.max_storage_gb``; the text is served as JSON with
nosniff. In process (TestClient): no workers, no models.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from core.config import AppConfig
from gateway.app import create_app
from gateway.recordings.cleanup import plan_cleanup, run_cleanup

KEY = "share-key-123456"
ADMIN = "admin-token-0123456789"
CHAT = {"title": "t", "messages": [{"role": "user", "text": "<script>alert(1)</script> hello"},
                                   {"role": "assistant", "text": "hi"}]}


def make_config(tmp_path, **sections) -> AppConfig:
    tree = {"data_dir": str(tmp_path), "workers": {"count": 0}, "admin": {"token": ADMIN},
            "recording": {"cleanup_interval_s": 3600}}
    for name, values in sections.items():
        tree.setdefault(name, {}).update(values)
    return AppConfig.model_validate(tree)


@pytest.fixture
def keyed(tmp_path):
    with client(make_config(tmp_path, auth={"api_keys": [KEY]})) as c:
        yield c


def client(config: AppConfig) -> TestClient:
    return TestClient(create_app(config), base_url="http://localhost")  # a host the gateway serves


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_with_keys_configured_creating_a_share_needs_a_key(keyed):
    r = keyed.post("/api/shares", json=CHAT)
    assert r.status_code == 401 and "API key" in r.json()["detail"], r.text
    assert keyed.post("/api/shares", json=CHAT, headers=bearer("wrong-key-0000000")).status_code == 401
    assert keyed.post("/api/shares", json=CHAT, headers=bearer(KEY)).status_code == 201
    assert keyed.post("/api/shares", json=CHAT, headers=bearer(ADMIN)).status_code == 201
    # Reading needs only the link.
    share_id = keyed.post("/api/shares", json=CHAT, headers=bearer(KEY)).json()["id"]
    assert keyed.get(f"/api/shares/{share_id}").status_code == 200


def test_an_open_service_still_takes_shares_without_a_key(tmp_path):
    with client(make_config(tmp_path)) as c:
        assert c.post("/api/shares", json=CHAT).status_code == 201


def test_creations_are_rate_limited_per_client(tmp_path):
    with client(make_config(tmp_path, shares={"per_ip_per_minute": 3})) as c:
        for _ in range(3):
            assert c.post("/api/shares", json=CHAT).status_code == 201
        r = c.post("/api/shares", json=CHAT)
        assert r.status_code == 429 and "too many shares" in r.json()["detail"], r.text
        assert int(r.headers["retry-after"]) >= 1
    assert len(list((tmp_path / "shares").glob("*.json"))) == 3


def test_a_share_is_served_as_json_with_nosniff_and_without_its_delete_hash(keyed):
    created = keyed.post("/api/shares", json=CHAT, headers=bearer(KEY)).json()
    r = keyed.get(f"/api/shares/{created['id']}")
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in r.headers["content-security-policy"]
    body = r.json()
    assert body["messages"] == CHAT["messages"] and body["id"] == created["id"]
    assert "delete_token_sha256" not in body and created["delete_token"] not in r.text


def test_expiry_defaults_to_30_days_can_be_shorter_never_longer(tmp_path):
    with client(make_config(tmp_path)) as c:
        made = c.post("/api/shares", json=CHAT).json()
        expires = datetime.fromisoformat(made["expires_at"])
        assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=1)
        r = c.post("/api/shares", json={**CHAT, "expires_in_days": 31})
        assert r.status_code == 422 and "at most 30 days" in r.text, r.text
        short = c.post("/api/shares", json={**CHAT, "expires_in_days": 0.5 / 86400}).json()  # half a second
        assert c.get(f"/api/shares/{short['id']}").status_code == 200
        time.sleep(0.6)
        assert c.get(f"/api/shares/{short['id']}").status_code == 404  # expired: gone for readers at once
    plan = plan_cleanup(make_config(tmp_path))
    assert [s.id for s in plan.expired_shares] == [short["id"]]
    run_cleanup(make_config(tmp_path))  # ... and cleanup deletes the file
    assert sorted(p.stem for p in (tmp_path / "shares").glob("*.json")) == [made["id"]]


def test_expiry_is_settable_in_config(tmp_path):
    with client(make_config(tmp_path, shares={"expiry_days": 2})) as c:
        made = c.post("/api/shares", json=CHAT).json()
        assert datetime.fromisoformat(made["expires_at"]) < datetime.now(UTC) + timedelta(days=2, minutes=1)
        assert c.post("/api/shares", json={**CHAT, "expires_in_days": 3}).status_code == 422


def test_whoever_holds_the_delete_token_or_the_admin_can_delete(keyed):
    a = keyed.post("/api/shares", json=CHAT, headers=bearer(KEY)).json()
    b = keyed.post("/api/shares", json=CHAT, headers=bearer(KEY)).json()
    assert keyed.delete(f"/api/shares/{a['id']}").status_code == 401
    assert keyed.delete(f"/api/shares/{a['id']}", headers=bearer(KEY)).status_code == 403  # a key is not enough
    assert keyed.delete(f"/api/shares/{a['id']}", headers=bearer(b["delete_token"])).status_code == 403
    assert keyed.delete(f"/api/shares/{a['id']}", headers=bearer(a["delete_token"])).status_code == 204
    assert keyed.get(f"/api/shares/{a['id']}").status_code == 404
    assert keyed.delete(f"/api/shares/{a['id']}", headers=bearer(a["delete_token"])).status_code == 404
    assert keyed.delete(f"/api/shares/{b['id']}", headers=bearer(ADMIN)).status_code == 204
    assert keyed.get(f"/api/shares/{b['id']}").status_code == 404


def test_shares_count_in_the_storage_cap(tmp_path):
    with client(make_config(tmp_path / "probe")) as c:  # one share's file size
        c.post("/api/shares", json=CHAT)
    size = next((tmp_path / "probe" / "shares").glob("*.json")).stat().st_size
    cap_gb = 3.5 * size / 1024**3
    with client(make_config(tmp_path, recording={"max_storage_gb": cap_gb})) as c:
        made = [c.post("/api/shares", json=CHAT) for _ in range(4)]
    assert [r.status_code for r in made] == [201, 201, 201, 507], [r.text for r in made]
    assert "max_storage_gb" in made[-1].json()["detail"]
    # A smaller cap: cleanup makes room by deleting the oldest shares first.
    ids = [r.json()["id"] for r in made[:3]]
    oldest = ids[0]
    path = tmp_path / "shares" / f"{oldest}.json"
    past = time.time() - 3600
    os.utime(path, (past, past))
    plan = plan_cleanup(make_config(tmp_path, recording={"max_storage_gb": 2.5 * size / 1024**3}))
    assert [s.id for s in plan.over_cap_shares] == [oldest], plan
