"""Hostile clients for both dialects and the call routes, on a running stack (issue 68).

One engine for the suite's fuzz test (``tests/e2e/test_fuzz_live.py``, ~25 s) and the bench
(``python -m bench fuzz --seconds 600``). A run is a loop of cases until its time is up, each one
of three kinds, at random:

- ``realtime``: a ``/v1/realtime`` session that gets a script of hostile frames;
- ``live``: a ``/v1/live/sessions`` WebSocket: ``session.start`` (valid, hostile or missing), then
  a script of hostile ``session.*`` / ``response.*`` / ``decision.*`` frames;
- ``calls``: a few ``POST /v1/realtime/calls`` and ``POST /v1/live/sessions`` with hostile bodies
  and offers (nested JSON, huge, many m-lines, garbage), each of which must be a 4xx.

A script mixes moves: single events with wrong or junk fields, unknown types, nesting bombs
(``"[" * 100000 + "]" * 100000``, bare and inside a real event), huge frames, binary frames,
invalid base64, text that is not JSON, events out of order, and floods (``response.create``,
``session.instructions.append``, appends). The client reads everything the server sends and then
leaves (a clean close or a TCP abort).

After every case what a user would notice is checked: a fresh session of the same dialect on the
same worker gets ``session.created`` / ``session.started`` within ``SERVE_WITHIN_S`` of the
hostile client leaving, and once that one has left too every slot is idle within
``IDLE_WITHIN_S`` (gateway and worker ``/health``); a close 1011 (worker failure) or 1013 (no slot)
on the hostile session, or a 5xx (or a 2xx to an offer that must be refused) on a call route, is a
failure too. Over the run: the worker's ``worker_error`` session ends (``/metrics``), tracebacks in
the processes' logs, and both processes' RSS, from after a warm-up (a session of each dialect and a
call answered: what loads once, such as aiortc in the gateway, is not growth).

Seeded: the run's seed is printed, and each case has its own seed (a failure names it); the same
seed replays the same cases in the same order (how many fit in the time depends on the machine).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import websockets
from websockets.protocol import State

MODEL = "omniduplex-cascade"
SERVE_WITHIN_S = 1.0  # a fresh session's session.created / session.started after the hostile client left
IDLE_WITHIN_S = 1.0  # every slot idle after the fresh session left
RECOVER_S = 15.0  # past a failure, how long the run waits for the slots to free before it stops
CASE_S = 1.2  # the most a case's script runs for before the client leaves
BOMB = 100_000  # the reproduction: "[" * 100000 + "]" * 100000
KINDS = ("realtime", "live", "calls")
BAD_CLOSES = {1011: "worker failure (1011)", 1013: "no free slot (1013)"}

Frame = str | bytes


@dataclass
class Target:
    """A running gateway with one worker: where to connect and what to watch."""

    url: str  # the gateway, http://host:port
    admin_headers: dict[str, str]
    worker_url: str
    worker_headers: dict[str, str]
    gateway_pid: int | None = None
    worker_pid: int | None = None
    gateway_log: Path | None = None
    worker_log: Path | None = None

    def ws(self, path: str, record: bool) -> str:
        query = f"model={MODEL}&record={'true' if record else 'false'}&app=fuzz"
        return self.url.replace("http", "ws", 1) + f"{path}?{query}"


@dataclass
class Result:
    seed: int
    seconds: float = 0.0
    cases: Counter = field(default_factory=Counter)  # by kind
    events_sent: int = 0  # WebSocket frames of the hostile clients
    bytes_sent: int = 0
    call_requests: int = 0
    call_statuses: Counter = field(default_factory=Counter)  # "4xx" ...
    sessions_opened: int = 0  # hostile sessions, then fresh ones
    sessions_served: int = 0  # fresh sessions served within SERVE_WITHIN_S
    serve_s: list[float] = field(default_factory=list)
    slots_held: int = 0  # cases after which a slot was still busy IDLE_WITHIN_S after the client left
    close_codes: Counter = field(default_factory=Counter)  # the hostile sessions' close codes
    worker_errors: int = 0  # sessions the worker ended as worker_error (its /metrics), over the run
    tracebacks: dict[str, int] = field(default_factory=dict)  # per process log, over the run
    first_traceback: dict[str, str] = field(default_factory=dict)
    rss_mb: dict[str, list[float]] = field(default_factory=lambda: {"worker": [], "gateway": []})
    failures: list[str] = field(default_factory=list)
    stopped_early: str = ""

    @property
    def crashed_readers(self) -> int:
        """Sessions that ended in an unhandled exception, and exceptions logged with a traceback."""
        return self.worker_errors + self.tracebacks.get("worker", 0)

    def rss(self, name: str) -> dict[str, float]:
        points = self.rss_mb[name]
        if not points:
            return {}
        return {"start": points[0], "max": max(points), "end": points[-1], "growth": round(points[-1] - points[0], 1)}

    def as_dict(self) -> dict[str, Any]:
        serve = sorted(self.serve_s)
        return {
            "seed": self.seed, "seconds": round(self.seconds, 1), "cases": dict(self.cases),
            "events_sent": self.events_sent, "mb_sent": round(self.bytes_sent / 2**20, 1),
            "call_requests": self.call_requests, "call_statuses": dict(self.call_statuses),
            "sessions_opened": self.sessions_opened, "sessions_served": self.sessions_served,
            "probes": sum(self.cases.values()),
            "serve_ms_p50": round(1000 * serve[len(serve) // 2]) if serve else None,
            "serve_ms_max": round(1000 * serve[-1]) if serve else None,
            "slots_held": self.slots_held, "crashed_readers": self.crashed_readers,
            "worker_errors": self.worker_errors, "tracebacks": self.tracebacks,
            "close_codes": {str(k): v for k, v in sorted(self.close_codes.items(), key=lambda kv: str(kv[0]))},
            "worker_rss_mb": self.rss("worker"), "gateway_rss_mb": self.rss("gateway"),
            "failures": self.failures, "stopped_early": self.stopped_early,
            "first_traceback": self.first_traceback,
        }


def table(d: dict[str, Any]) -> str:
    """One markdown table of a run (``Result.as_dict()``)."""
    def rss(r: dict[str, float]) -> str:
        return f"{r['start']:.0f} / {r['max']:.0f} / {r['end']:.0f} MB ({r['growth']:+.1f})" if r else "–"

    rows = [
        ("seed, seconds", f"{d['seed']}, {d['seconds']} s"),
        ("cases (realtime / live / calls)", " / ".join(str(d["cases"].get(k, 0)) for k in KINDS)),
        ("events sent (WebSocket frames)", f"{d['events_sent']:,} ({d['mb_sent']} MB)"),
        ("call-route requests (by status)", f"{d['call_requests']} ({', '.join(f'{k}: {v}' for k, v in sorted(d['call_statuses'].items())) or 'none'})"),
        ("sessions opened (hostile + fresh)", f"{d['sessions_opened']}"),
        ("fresh sessions served within 1 s", f"{d['sessions_served']} of {d['probes']} (p50 {d['serve_ms_p50']} ms, "
                                              f"max {d['serve_ms_max']} ms)"),
        ("crashed readers (worker_error + worker tracebacks)", f"{d['crashed_readers']} ({d['worker_errors']} + "
                                                               f"{d['tracebacks'].get('worker', 0)})"),
        ("gateway tracebacks", f"{d['tracebacks'].get('gateway', 0)}"),
        ("slots held past the client", f"{d['slots_held']}"),
        ("hostile sessions' close codes", ", ".join(f"{k}: {v}" for k, v in d["close_codes"].items()) or "–"),
        ("worker RSS start (after a warm-up) / max / end", rss(d["worker_rss_mb"])),
        ("gateway RSS start (after a warm-up) / max / end", rss(d["gateway_rss_mb"])),
        ("failures", f"{len(d['failures'])}" + (f" (stopped early: {d['stopped_early']})" if d["stopped_early"] else "")),
    ]
    lines = ["| figure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
    lines += [f"- {f}" for f in d["failures"][:20]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- values


def junk(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value of any type: what a field must survive in place of the right one."""
    pick = rng.randrange(11 if depth < 3 else 8)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, -1, 1, 2**31, -(2**63), 2**64, 10**30, rng.randint(-1000, 10**9)])
    if pick == 3:
        return rng.choice([0.5, -1e308, 1e308, 1e-320, 3.14])
    if pick == 4:
        return ""
    if pick == 5:
        return rng.choice(["x" * rng.choice([1, 100, 70_000]), "\ud800", "\x00", "é" * 50, "<script>", "../../etc/passwd",
                           "sess_" + "0" * 40, "item_bogus", "%%%", "null"])
    if pick == 6:
        return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(1, 40)))
    if pick == 7:
        return rng.choice([float("nan"), float("inf")])  # json.dumps writes NaN / Infinity: not JSON
    if pick == 8:
        return [junk(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if pick == 9:
        return {rng.choice(["type", "id", "", "a" * 300, "session", "item", "audio"]): junk(rng, depth + 1)
                for _ in range(rng.randrange(0, 4))}
    return [[[[[[]]]]]]


def either(rng: random.Random, good: Any, p_good: float = 0.5) -> Any:
    return good if rng.random() < p_good else junk(rng)


def pcm_b64(rng: random.Random, ms: int = 20, rate: int = 24000) -> str:
    n = rate * ms // 1000
    return base64.b64encode(bytes(rng.getrandbits(8) for _ in range(2 * min(n, 960))) + b"\x00" * 2 * max(0, n - 960)).decode()


BAD_B64 = ["%%%", "AAA", "A", "====", "AAAA====", "not base64 at all!", "QUJD\x00", "AA\nAA", "😀😀😀😀", "-_-_"]


def bad_b64(rng: random.Random) -> Any:
    return rng.choice([*BAD_B64, junk(rng), "A" * rng.choice([5, 4 * 10**5 + 1])])


def dumps(ev: Any) -> str:
    return json.dumps(ev, separators=(",", ":"))


def bomb(rng: random.Random, kind: str) -> Frame:
    """Deep nesting, bare or as a field of a real event of this dialect."""
    n = rng.choice([BOMB, BOMB, 1000, 20_000])
    shape = rng.randrange(5)
    deep = "[" * n + "]" * n
    if shape == 0:
        return deep
    if shape == 1:
        return '{"a":' * n + "1" + "}" * n
    if shape == 2:
        return "[" * n  # unbalanced: not JSON, and deep before the parser finds out
    field_of = {"session.update": "session", "session.instructions.append": "content", "response.create": "response",
                "conversation.item.create": "item", "session.start": "session", "response.item.create": "item"}
    t = kind if kind in field_of else rng.choice(list(field_of))
    return '{"type":' + dumps(t) + "," + dumps(field_of[t]) + ":" + deep + "}"


def huge(rng: random.Random, kind: str) -> Frame:
    """Frames from 64 KiB to 5 MiB, rarely over the transport's cap (the server closes with 1009)."""
    size = rng.choice([64 * 1024, 1024 * 1024, 5 * 1024 * 1024, 5 * 1024 * 1024 if rng.random() < 0.8 else 9 * 1024 * 1024])
    shape = rng.randrange(4)
    if shape == 0:
        return "x" * size
    if shape == 1:
        return dumps({"type": kind, "audio": "A" * size, "content": "A" * 16})
    if shape == 2:
        return dumps({"type": kind, "session": {"instructions": "word " * (size // 5)}, "content": "y" * size})
    return dumps({"type": kind, "event_id": "e" * size})


def binary(rng: random.Random) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 2, 64, 4096]))) + b"\x00" * rng.choice([0, 65536])


NOT_JSON = ["", " ", "{", "}", "[", "null", "[]", "1e999999", '"' * 1000, "\x00", "{'type': 'x'}", "NaN",
            '{"type":"session.update",}', '{"type":"x"}{"type":"y"}', "\ufeff{}", "true", '"session.start"']


def not_json(rng: random.Random) -> str:
    return rng.choice([*NOT_JSON, "".join(chr(rng.randrange(1, 0xD7FF)) for _ in range(rng.randrange(1, 200)))])


# ---------------------------------------------------------------------------- Realtime events

REALTIME_TYPES = ["session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
                  "conversation.item.create", "conversation.item.truncate", "conversation.item.delete",
                  "conversation.item.retrieve", "response.create", "response.cancel", "output_audio_buffer.clear",
                  "session.pause", "session.resume", "input_image_buffer.append", "transcription_session.update"]


def realtime_event(rng: random.Random) -> dict[str, Any]:
    t = rng.choice(REALTIME_TYPES + ["nope", "session.start", "response.item.create", ""])
    ev: dict[str, Any] = {"type": either(rng, t, 0.95)}
    if rng.random() < 0.3:
        ev["event_id"] = either(rng, f"c_{rng.randrange(10**6)}")
    if t in ("session.update", "transcription_session.update"):
        ev["session"] = either(rng, {
            "type": either(rng, rng.choice(["realtime", "transcription"])),
            "instructions": either(rng, "Be brief."),
            "audio": either(rng, {"input": {"turn_detection": either(rng, rng.choice([None, {"type": "server_vad"},
                                                                                      {"type": "semantic_vad"}])),
                                            "format": either(rng, {"type": "audio/pcmu"})},
                                  "output": {"voice": junk(rng), "format": junk(rng)}}),
            "tools": either(rng, [{"type": "function", "name": either(rng, "f"), "parameters": junk(rng)}]),
            "tool_choice": junk(rng), "max_output_tokens": either(rng, rng.choice([1, 5, "inf"])),
            "output_modalities": either(rng, ["text"]), "tracing": junk(rng)}, 0.7)
    elif t == "input_audio_buffer.append":
        ev["audio"] = pcm_b64(rng, rng.choice([20, 100])) if rng.random() < 0.5 else bad_b64(rng)
    elif t == "input_image_buffer.append":
        ev["image"] = either(rng, base64.b64encode(b"\xff\xd8\xff" + bytes(rng.getrandbits(8) for _ in range(64))).decode())
    elif t == "conversation.item.create":
        ev["item"] = either(rng, {"type": either(rng, rng.choice(["message", "function_call_output", "function_call"])),
                                  "role": either(rng, rng.choice(["user", "system", "assistant"])),
                                  "id": either(rng, f"item_{rng.randrange(100)}"), "call_id": junk(rng),
                                  "output": junk(rng),
                                  "content": either(rng, [{"type": either(rng, "input_text"), "text": either(rng, "Hi.")}])},
                            0.8)
        ev["previous_item_id"] = junk(rng) if rng.random() < 0.3 else None
    elif t == "conversation.item.truncate":
        ev.update(item_id=either(rng, "item_bogus"), content_index=either(rng, 0), audio_end_ms=either(rng, 10**9))
    elif t in ("conversation.item.delete", "conversation.item.retrieve"):
        ev["item_id"] = either(rng, "item_bogus")
    elif t == "response.create":
        if rng.random() < 0.7:
            ev["response"] = either(rng, {"instructions": either(rng, "Say one word."), "max_output_tokens": either(rng, 4),
                                          "conversation": either(rng, rng.choice(["none", "auto"])),
                                          "output_modalities": either(rng, ["text"]), "input": junk(rng),
                                          "tool_choice": junk(rng), "metadata": junk(rng)}, 0.8)
    elif rng.random() < 0.3:
        ev[rng.choice(["item_id", "response_id", "session", "audio"])] = junk(rng)
    return ev


def realtime_flood(rng: random.Random) -> list[Frame]:
    n = rng.choice([200, 1000, 3000])
    one = rng.choice([
        {"type": "response.create", "response": {"max_output_tokens": 1, "output_modalities": ["text"]}},
        {"type": "input_audio_buffer.append", "audio": pcm_b64(rng, 20)},
        {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": "x"}]}},
        {"type": "session.update", "session": {"type": "realtime", "instructions": "y" * 100}},
        {"type": "response.cancel"}, {"type": "nope"}, {"type": "conversation.item.retrieve", "item_id": "item_x"},
    ])
    frame = dumps(one)
    return [frame] * n


def realtime_out_of_order(rng: random.Random) -> list[Frame]:
    return [dumps(e) for e in rng.choice([
        [{"type": "response.cancel"}, {"type": "response.cancel"}],
        [{"type": "input_audio_buffer.commit"}, {"type": "input_audio_buffer.commit"}],
        [{"type": "session.resume"}, {"type": "session.pause"}, {"type": "session.pause"},
         {"type": "response.create"}, {"type": "session.resume"}, {"type": "session.resume"}],
        [{"type": "conversation.item.truncate", "item_id": "item_none", "content_index": 0, "audio_end_ms": 1}],
        [{"type": "response.create"}, {"type": "conversation.item.delete", "item_id": "item_x"},
         {"type": "response.cancel"}, {"type": "response.create"}, {"type": "output_audio_buffer.clear"}],
        [{"type": "session.update", "session": {"type": "transcription"}}, {"type": "response.create"}],
    ])]


def realtime_script(rng: random.Random) -> list[Frame | float]:
    moves: list[tuple[float, Callable[[], list[Frame | float]]]] = [
        (6, lambda: [dumps(realtime_event(rng))]),
        (2, lambda: [bomb(rng, rng.choice(["session.update", "conversation.item.create", "response.create"]))]),
        (1, lambda: [huge(rng, rng.choice(["input_audio_buffer.append", "session.update"]))]),
        (1, lambda: [binary(rng)]),
        (2, lambda: [not_json(rng)]),
        (1, lambda: [dumps({"type": "input_audio_buffer.append", "audio": bad_b64(rng)})]),
        (1, lambda: realtime_flood(rng)),
        (2, lambda: realtime_out_of_order(rng)),
        (1, lambda: [rng.choice([0.0, 0.05, 0.2])]),
    ]
    return _script(rng, moves)


def _script(rng: random.Random, moves: list[tuple[float, Callable[[], list[Frame | float]]]]) -> list[Frame | float]:
    out: list[Frame | float] = []
    weights = [w for w, _ in moves]
    for _ in range(rng.randint(1, 12)):
        out.extend(rng.choices(moves, weights)[0][1]())
    return out


# ---------------------------------------------------------------------------- Live events

LIVE_TYPES = ["session.start", "session.update", "session.input_audio.append", "session.input_audio.mute",
              "session.input_audio.unmute", "session.output_audio.fixture.play", "session.instructions.append",
              "session.thinking.append", "session.commentary.append", "decision.create", "decision.item.create",
              "decision.item.delete", "response.item.create", "response.create", "session.close"]
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def live_config(rng: random.Random) -> dict[str, Any]:
    """A session config a Live client could send, now and then with a field of the wrong type."""
    s: dict[str, Any] = {"model": MODEL}
    if rng.random() < 0.5:
        s["instructions"] = either(rng, "Answer in one short sentence.", 0.9)
    d = rng.random()
    if d < 0.4:
        s["delegation"] = {"type": "responses", "responses": {"model": "omni", "tools": [WEATHER]}}
    elif d < 0.6:
        s["delegation"] = {"type": "client"}
    if rng.random() < 0.3:
        s["audio"] = {"format": either(rng, rng.choice([{"type": "audio/pcm", "rate": 24000}, {"type": "audio/pcmu"},
                                                         {"type": "audio/pcma"}]), 0.9)}
    if rng.random() < 0.2:
        s["input"] = [{"role": "user", "content": [{"type": "input_text", "text": "Hello."}]}] * rng.choice([1, 3])
    if rng.random() < 0.1:
        s[rng.choice(["audio", "input", "delegation", "client", "bogus"])] = junk(rng)
    return s


def live_event(rng: random.Random) -> dict[str, Any]:
    t = rng.choice(LIVE_TYPES + ["session.fly", "input_audio_buffer.append", "response.cancel", ""])
    ev: dict[str, Any] = {"type": either(rng, t, 0.95)}
    if rng.random() < 0.4:
        ev["event_id"] = either(rng, f"c_{rng.randrange(10**6)}", 0.9)
    if t in ("session.start", "session.update"):
        ev["session"] = live_config(rng) if rng.random() < 0.7 else junk(rng)
        if t == "session.update" and isinstance(ev["session"], dict) and rng.random() < 0.3:
            ev["session"]["triggers"] = junk(rng)
    elif t == "session.input_audio.append":
        ev["audio"] = pcm_b64(rng, rng.choice([20, 100])) if rng.random() < 0.6 else bad_b64(rng)
    elif t in ("session.instructions.append", "session.thinking.append", "session.commentary.append"):
        ev["content"] = either(rng, "It is sunny.", 0.7)
        if rng.random() < 0.5:
            ev["delegation_id"] = either(rng, rng.choice([None, "dlg_unknown"]))
    elif t == "response.item.create":
        ev["item"] = either(rng, rng.choice([
            {"type": "function_call_output", "call_id": either(rng, "call_bogus"), "output": junk(rng)},
            {"type": "message", "role": either(rng, "user"), "content": either(rng, [{"type": "input_text", "text": "Hi."}])},
            {"type": either(rng, "function_call"), "name": junk(rng)},
        ]), 0.85)
    elif t == "response.create":
        if rng.random() < 0.3:
            ev["response"] = junk(rng)
    elif t.startswith("decision."):
        ev[rng.choice(["item", "decision", "item_id"])] = junk(rng)
    elif rng.random() < 0.2:
        ev[rng.choice(["audio", "session", "item"])] = junk(rng)
    return ev


def live_flood(rng: random.Random) -> list[Frame]:
    n = rng.choice([200, 1000, 3000])
    one = rng.choice([
        {"type": "response.create"},
        {"type": "session.instructions.append", "content": "Use Celsius."},
        {"type": "session.commentary.append", "content": "Hm."},
        {"type": "session.input_audio.append", "audio": pcm_b64(rng, 20)},
        {"type": "response.item.create", "item": {"type": "message", "role": "user", "content": "x"}},
        {"type": "session.input_audio.mute"}, {"type": "session.fly"},
        {"type": "session.update", "session": {"instructions": "z" * 50}},
    ])
    return [dumps(one)] * n


def live_out_of_order(rng: random.Random) -> list[Frame]:
    start = {"type": "session.start", "session": {"model": MODEL}}
    return [dumps(e) for e in rng.choice([
        [start, start],
        [{"type": "session.close"}, {"type": "response.create"}, {"type": "session.instructions.append", "content": "x"},
         {"type": "session.close"}],
        [{"type": "response.item.create", "item": {"type": "function_call_output", "call_id": "call_none",
                                                   "output": "{}"}}, {"type": "response.create"}],
        [{"type": "session.commentary.append", "content": "late", "delegation_id": "dlg_none"}],
        [{"type": "session.input_audio.mute"}, {"type": "session.input_audio.mute"},
         {"type": "session.input_audio.unmute"}, {"type": "session.input_audio.unmute"}],
        [{"type": "session.update", "session": {"delegation": {"type": "client"}}},
         {"type": "session.update", "session": {"delegation": {"type": "responses", "responses": {"model": "o"}}}}],
    ])]


def live_script(rng: random.Random) -> list[Frame | float]:
    moves: list[tuple[float, Callable[[], list[Frame | float]]]] = [
        (6, lambda: [dumps(live_event(rng))]),
        (3, lambda: [bomb(rng, rng.choice(["session.update", "session.instructions.append", "response.item.create"]))]),
        (1, lambda: [huge(rng, rng.choice(["session.input_audio.append", "session.instructions.append"]))]),
        (1, lambda: [binary(rng)]),
        (2, lambda: [not_json(rng)]),
        (1, lambda: [dumps({"type": "session.input_audio.append", "audio": bad_b64(rng)})]),
        (1, lambda: live_flood(rng)),
        (2, lambda: live_out_of_order(rng)),
        (1, lambda: [rng.choice([0.0, 0.05, 0.2])]),
    ]
    return _script(rng, moves)


# ---------------------------------------------------------------------------- call routes

ICE = ["a=ice-ufrag:abcd", "a=ice-pwd:0123456789abcdefghijkl", "a=fingerprint:sha-256 " + ":".join(["AB"] * 32),
       "a=setup:actpass"]
AUDIO = ["m=audio 9 UDP/TLS/RTP/SAVPF 111 0", "c=IN IP4 0.0.0.0", "a=mid:0", "a=sendrecv", "a=rtcp-mux",
         "a=rtpmap:111 opus/48000/2", "a=rtpmap:0 PCMU/8000", *ICE]
DATA = ["m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "c=IN IP4 0.0.0.0", "a=mid:1", "a=sctp-port:5000", *ICE]
HEAD = ["v=0", "o=- 1 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0 1", "a=msid-semantic:WMS *"]


def offer(head: list[str] = HEAD, sections: list[list[str]] | None = None) -> str:
    """A browser-like offer (microphone with Opus, the data channel); the shape aiortc answers."""
    lines = [*head, *[line for s in (sections if sections is not None else [AUDIO, DATA]) for line in s]]
    return "\r\n".join(lines) + "\r\n"


def section(kind: str, port: int, mid: int) -> list[str]:
    fmt = {"audio": ["111"], "video": ["96"], "application": ["webrtc-datachannel"]}.get(kind, ["0"])
    proto = "UDP/DTLS/SCTP" if kind == "application" else "UDP/TLS/RTP/SAVPF"
    rtp = {"audio": ["a=rtpmap:111 opus/48000/2"], "video": ["a=rtpmap:96 VP8/90000"]}.get(kind, [])
    return [f"m={kind} {port} {proto} {' '.join(fmt)}", "c=IN IP4 0.0.0.0", f"a=mid:{mid}", "a=rtcp-mux", *rtp, *ICE]


def hostile_offer(rng: random.Random) -> str:
    """An offer that must be refused: each mutation leaves out or breaks something a call needs,
    or asks for more than a call takes."""
    pick = rng.randrange(12)
    if pick == 0:  # many m-lines, on port 0 (finding 3) or not
        kind = rng.choice(["audio", "video", "application"])
        port = rng.choice([0, 0, 9])
        n = rng.choice([1, 20, 150])
        return offer(sections=[AUDIO, DATA, *[section(kind, port, 10 + i) for i in range(n)]])
    if pick == 1:  # m-lines of kinds a call does not take
        return offer(sections=[AUDIO, DATA, section(rng.choice(["text", "message", "x" * 200, "image"]),
                                                    rng.choice([0, 9]), 7)])
    if pick == 2:
        return offer(sections=[DATA])  # no microphone
    if pick == 3:
        return offer(sections=[AUDIO])  # no data channel
    if pick == 4:  # the microphone rejected: port 0
        return offer(sections=[[AUDIO[0].replace(" 9 ", " 0 "), *AUDIO[1:]], DATA])
    if pick == 5:  # no Opus
        return offer(sections=[[line for line in AUDIO if "opus" not in line and not line.startswith("m=")]
                               + [], DATA]).replace("a=mid:0", "m=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0", 1)
    if pick == 6:  # no ICE or no DTLS on one line
        drop = rng.choice(["a=ice-pwd", "a=ice-ufrag", "a=fingerprint"])
        return offer(sections=[[line for line in AUDIO if not line.startswith(drop)], DATA])
    if pick == 7:  # broken lines aiortc's parser asserts on
        bad = rng.choice(["m=audio x y z", "m=audio 9 UDP/TLS/RTP/SAVPF 999", "m=audio 9 UDP/TLS/RTP/SAVPF 111 abc",
                          "a=rtpmap:abc", "a=fingerprint:", "a=sctp-port:x", "a=ssrc:x", "c=IN IP9 nowhere",
                          "a=extmap:x", "a=fmtp:111", "m=", "a=candidate:x"])
        return offer(sections=[[*AUDIO, bad], DATA]) if not bad.startswith("m=") else offer(sections=[[bad, *AUDIO[1:]], DATA])
    if pick == 8:  # over 64 KiB
        return offer(sections=[[*AUDIO, "a=x-pad:" + "p" * rng.choice([70_000, 400_000])], DATA])
    if pick == 9:
        return rng.choice(["", "v=0", "v=0\r\n", "v=1\r\n" + offer()[5:], "hello", "\x00" * 100, "m=audio 9 RTP/AVP 0"])
    if pick == 10:  # no RTCP mux (aiortc refuses)
        return offer(sections=[[line for line in AUDIO if line != "a=rtcp-mux"], DATA])
    return "v=0\r\n" + "".join(chr(rng.randrange(32, 127)) for _ in range(rng.randrange(10, 3000)))


def multipart_session(rng: random.Random) -> tuple[str, bool, str]:
    """(a ``session`` part, whether it must be refused, what it is). Some are odd but valid (a
    long prompt, an unknown model name): a call may be answered, and is hung up at once."""
    pick = rng.randrange(7)
    if pick == 0:
        return bomb(rng, "session.update"), True, "session: nesting bomb"
    if pick == 1:
        return rng.choice(["{not json", "[]", "null", '"realtime"', "1e999", "{" * 10]), True, "session: not an object"
    if pick == 2:
        return dumps({"type": "realtime", "tools": [junk(rng) for _ in range(50)]}), True, "session: 50 junk tools"
    if pick == 3:
        return dumps({"type": "realtime", "audio": {"input": {"turn_detection": junk(rng), "format": 7}}}), True, \
            "session: junk audio"
    if pick == 4:
        return dumps({"type": "realtime", "bogus": junk(rng)}), True, "session: unknown field"
    if pick == 5:
        return dumps({"type": "realtime", "instructions": "x" * 200_000}), False, "session: 200k-character prompt"
    return dumps({"type": "realtime", "model": junk(rng)}), False, "session: junk model"


def call_request(rng: random.Random) -> tuple[str, dict[str, Any], str, bool]:
    """(path, httpx arguments, what it is, whether it must be refused) of one hostile call-route
    request: a 4xx, never a 5xx, and a 2xx only to an odd but valid one."""
    route = rng.randrange(5)
    if route == 0:  # /v1/realtime/calls, the offer as the body
        sdp = hostile_offer(rng)
        ctype = rng.choice(["application/sdp", "application/sdp", "text/plain", "application/json", ""])
        return "/v1/realtime/calls", {"content": sdp.encode(), "headers": {"Content-Type": ctype}}, \
            f"calls: hostile offer as {ctype or 'no type'} ({len(sdp)} chars)", True
    if route == 1:  # /v1/realtime/calls, multipart: a hostile session part with a good offer, or a hostile offer
        if rng.random() < 0.6:
            session, must_refuse, what = multipart_session(rng)
            sdp = offer()
        else:
            session, must_refuse, what = dumps({"type": "realtime"}), True, "hostile offer"
            sdp = hostile_offer(rng)
        files = {"sdp": (None, sdp.encode(), "application/sdp"), "session": (None, session.encode(), "application/json")}
        return "/v1/realtime/calls", {"files": files}, f"calls multipart: {what}", must_refuse
    # /v1/live/sessions: JSON
    if route == 2:
        body = bomb(rng, "session.start") if rng.random() < 0.5 else rng.choice(
            ['{"session":' + "[" * BOMB + "]" * BOMB + "}", '{"transport":{"sdp":' + '{"a":' * 5000 + "1" + "}" * 5000 + "}}",
             "not json", "", "[]", "null", '{"session":{}}'])
        return "/v1/live/sessions", {"content": body.encode(), "headers": {"Content-Type": "application/json"}}, \
            f"live: body not a session ({len(body)} chars, {body[:16]!r}...)", True
    if route == 3:
        body = {"session": either(rng, {"model": MODEL, "instructions": either(rng, "Hi.")}, 0.3),
                "transport": either(rng, {"type": "webrtc", "sdp": offer()}, 0.3)}
        if rng.random() < 0.3:
            body[rng.choice(["session", "transport", "extra"])] = junk(rng)
        if isinstance(body["session"], dict) and body["session"].get("model") == MODEL:
            body["session"]["audio"] = {"format": {"type": "audio/pcm", "rate": 24000}}  # refused on a call
        return "/v1/live/sessions", {"content": dumps(body).encode(), "headers": {"Content-Type": "application/json"}}, \
            "live: junk session or transport", True
    sdp = hostile_offer(rng)
    body = {"session": {"model": MODEL}, "transport": {"type": "webrtc", "sdp": sdp}}
    return "/v1/live/sessions", {"content": dumps(body).encode(), "headers": {"Content-Type": "application/json"}}, \
        f"live: hostile offer ({len(sdp)} chars)", True


# ---------------------------------------------------------------------------- the run


class _Watch:
    """The stack's figures: slots, the worker's session ends, RSS, tracebacks in the logs."""

    def __init__(self, target: Target, http: httpx.AsyncClient) -> None:
        self.t = target
        self.http = http
        self.log_start: dict[str, int] = {}

    async def busy(self) -> str:
        """'' when every slot is idle; else what is busy."""
        gw = (await self.http.get(f"{self.t.url}/health", headers=self.t.admin_headers)).json()
        worker = (await self.http.get(f"{self.t.worker_url}/health", headers=self.t.worker_headers)).json()
        if gw.get("slots_busy") == 0 and gw.get("queue_length") == 0 and worker.get("active_sessions") == 0:
            return ""
        return (f"gateway slots_busy={gw.get('slots_busy')} queue_length={gw.get('queue_length')}, "
                f"worker active_sessions={worker.get('active_sessions')}")

    async def idle_within(self, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while True:
            try:
                what = await self.busy()
            except (httpx.HTTPError, ValueError) as exc:
                what = f"/health did not answer ({type(exc).__name__})"
            if not what or time.monotonic() > deadline:
                return what
            await asyncio.sleep(0.02)

    async def worker_errors(self) -> int:
        text = (await self.http.get(f"{self.t.worker_url}/metrics", headers=self.t.worker_headers)).text
        m = re.search(r'^omniduplex_worker_sessions_total\{end_reason="worker_error"\} ([0-9.e+]+)$', text, re.M)
        return int(float(m.group(1))) if m else 0

    def rss(self, result: Result) -> None:
        for name, pid in (("worker", self.t.worker_pid), ("gateway", self.t.gateway_pid)):
            if pid is not None:
                with contextlib.suppress(psutil.Error):
                    result.rss_mb[name].append(round(psutil.Process(pid).memory_info().rss / 2**20, 1))

    def _logs(self) -> dict[str, Path]:
        return {name: p for name, p in (("worker", self.t.worker_log), ("gateway", self.t.gateway_log)) if p is not None}

    async def mark_logs(self) -> None:
        for name, path in self._logs().items():
            self.log_start[name] = await asyncio.to_thread(lambda p=path: p.stat().st_size if p.exists() else 0)

    async def tracebacks(self, result: Result) -> None:
        """Tracebacks the processes logged since ``mark_logs`` (each says an exception nobody handled
        as it should: a reader that died, a route that answered 500)."""
        for name, path in self._logs().items():
            def read(p: Path = path, start: int = self.log_start.get(name, 0)) -> str:
                with p.open("rb") as f:
                    f.seek(start)
                    return f.read().decode("utf-8", "replace")
            text = await asyncio.to_thread(read)
            n = text.count("Traceback (most recent call last)") + text.count("Task exception was never retrieved")
            result.tracebacks[name] = n
            at = text.find("Traceback (most recent call last)")
            if at >= 0:
                result.first_traceback[name] = _traceback_at(text, at)


def _traceback_at(text: str, at: int) -> str:
    """The log line before the traceback at ``at``, its frames in this repository (not in
    libraries) and the exception."""
    line_start = text.rfind("\n", 0, max(0, at - 1))
    head = text[text.rfind("\n", 0, max(0, line_start)) + 1:at].strip()
    lines = text[at:].splitlines()
    end = next((i for i, line in enumerate(lines[1:], 1) if line and not line.startswith(" ")), len(lines) - 1)
    ours: list[str] = []
    for i in range(1, end):
        line = lines[i]
        if line.lstrip().startswith("File ") and "site-packages" not in line and "/lib/python3" not in line:
            ours += [line, lines[i + 1] if i + 1 < end else ""]
    return "\n".join([head, lines[0], *ours[-12:], "  ...", *lines[max(1, end - 2):end + 1]])


async def _drain(ws, seen: list[dict], ready: asyncio.Event, ready_types: tuple[str, ...]) -> None:
    """Read everything the server sends; ``ready`` once an event of ``ready_types`` came."""
    with contextlib.suppress(websockets.ConnectionClosed):
        async for message in ws:
            if isinstance(message, str) and len(message) < 200_000:
                with contextlib.suppress(ValueError):
                    ev = json.loads(message)
                    if isinstance(ev, dict):
                        if ev.get("type") in ready_types:
                            ready.set()
                        if ev.get("type") == "error" and len(seen) < 50:
                            seen.append(ev)


def _close_code(ws) -> int:
    """The code of the server's close frame; 1006 when the connection ended without one."""
    return ws.close_code if ws.close_code is not None else 1006


async def _hostile_session(target: Target, rng: random.Random, dialect: str, result: Result) -> tuple[str, list[str]]:
    """One hostile client; returns how its session ended ('' when fine, else why) and a summary of
    what it sent."""
    live = dialect == "live"
    url = target.ws("/v1/live/sessions" if live else "/v1/realtime", record=rng.random() < 0.2)
    headers = {"OpenAI-Beta": "realtime=v1"} if not live and rng.random() < 0.25 else None
    sent: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        ws = await stack.enter_async_context(websockets.connect(url, max_size=None, additional_headers=headers,
                                                                open_timeout=10, close_timeout=2))
        result.sessions_opened += 1
        errors: list[dict] = []
        ready = asyncio.Event()
        reader = asyncio.create_task(_drain(ws, errors, ready, ("session.started",) if live else ("session.created",)))
        stack.push_async_callback(_cancel, reader)
        script: list[Frame | float] = []
        if live:
            start = rng.random()
            if start < 0.75:
                script.append(dumps({"type": "session.start", "event_id": "c_start", "session": live_config(rng)}))
            elif start < 0.9:
                script.append(dumps({"type": "session.start", "session": junk(rng)}))
            script += live_script(rng)
        else:
            script += realtime_script(rng)
        deadline = time.monotonic() + CASE_S
        try:
            if not live:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ready.wait(), 10)
            for i, step in enumerate(script):
                if isinstance(step, float):
                    await asyncio.sleep(step)
                    continue
                await ws.send(step)
                result.events_sent += 1
                result.bytes_sent += len(step)
                if not sent or sent[-1].split(" ×")[0] != _describe(step):
                    sent.append(_describe(step))
                else:
                    head, _, count = sent[-1].partition(" ×")
                    sent[-1] = f"{head} ×{int(count or 1) + 1}"
                if live and i == 0 and isinstance(step, str) and step.startswith('{"type":"session.start","event_id":"c_start"'):
                    with contextlib.suppress(TimeoutError):  # wait for it, so what follows meets a started session
                        await asyncio.wait_for(ready.wait(), 5)
                if time.monotonic() > deadline:
                    break
            await asyncio.sleep(rng.choice([0.0, 0.05, 0.3]))  # let some answers come
        except websockets.ConnectionClosed:
            pass
        code: int | str | None = _close_code(ws) if ws.state in (State.CLOSING, State.CLOSED) else None
        if code is None:  # still open: the client leaves
            if rng.random() < 0.5:
                ws.transport.abort()
                await asyncio.sleep(0)
                code = "abort"
            else:
                await ws.close()
                code = "close"
        result.close_codes[code] += 1
        server_errors = [e for e in errors if (e.get("error") or {}).get("type") == "server_error"]
        if code in BAD_CLOSES:
            return f"the server closed the hostile session: {BAD_CLOSES[code]}", sent
        if server_errors:
            return f"server_error event: {server_errors[0]['error']}", sent
    return "", sent


async def _cancel(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _describe(frame: Frame) -> str:
    """A short name for a frame, for a failure's summary."""
    if isinstance(frame, bytes):
        return f"binary[{len(frame)}]"
    if frame.startswith("[[[") or frame.startswith('{"a":{"a":'):
        return f"bomb[{len(frame)}]"
    m = re.match(r'\{"type":("[^"]{0,60}")', frame)
    kind = json.loads(m.group(1)) if m else "not-json"
    if "[[[[[[[[[[" in frame[:5000] or '{"a":{"a":{"a":' in frame[:200]:
        kind += "+bomb"
    return kind + (f"[{len(frame) // 1024} KiB]" if len(frame) > 60_000 else "")


async def _calls_case(target: Target, rng: random.Random, http: httpx.AsyncClient, result: Result) -> tuple[str, list[str]]:
    sent: list[str] = []
    for _ in range(rng.randint(1, 6)):
        path, kwargs, what, must_refuse = call_request(rng)
        sent.append(what)
        r = await http.post(target.url + path, **kwargs)
        result.call_requests += 1
        result.call_statuses[f"{r.status_code // 100}xx"] += 1
        if r.status_code >= 500:
            return f"{path} answered {r.status_code} to {what}: {r.text[:300]}", sent
        if r.status_code < 400:
            await _hang_up(http, target, path, r)
            if must_refuse:
                return f"{path} answered {r.status_code} to a request that must be refused ({what})", sent
    return "", sent


async def _hang_up(http: httpx.AsyncClient, target: Target, path: str, r: httpx.Response) -> None:
    if path == "/v1/realtime/calls":
        call = (r.headers.get("location") or "").rsplit("/", 1)[-1]
    else:
        with contextlib.suppress(ValueError, AttributeError):
            call = r.json()["session"]["id"]
    with contextlib.suppress(httpx.HTTPError, UnboundLocalError):
        await http.post(f"{target.url}{path}/{call}/hangup", headers=target.admin_headers)


async def probe(target: Target, dialect: str, since: float) -> tuple[float | None, str]:
    """A fresh, well-behaved session of ``dialect``: (seconds from ``since`` to its
    ``session.created`` / ``session.started``, '') or (None, why it was not served in time)."""
    live = dialect == "live"
    url = target.ws("/v1/live/sessions" if live else "/v1/realtime", record=False)
    want = "session.started" if live else "session.created"
    try:
        async with asyncio.timeout(SERVE_WITHIN_S * 5):  # past the goal, to say how late it was
            async with websockets.connect(url, open_timeout=None, close_timeout=2) as ws:
                if live:
                    await ws.send(dumps({"type": "session.start", "session": {"model": MODEL}}))
                async for message in ws:
                    ev = json.loads(message)
                    if ev.get("type") == want:
                        return time.monotonic() - since, ""
                    if ev.get("type") == "error":
                        return None, f"error {ev['error'].get('code')}: {ev['error'].get('message')}"
                return None, f"closed with {_close_code(ws)} before {want}"
    except TimeoutError:
        return None, f"no {want} within {SERVE_WITHIN_S * 5:.0f} s"
    except (OSError, websockets.WebSocketException) as exc:
        return None, f"{type(exc).__name__}: {exc}"


async def run(target: Target, seconds: float, seed: int | None = None, kinds: tuple[str, ...] = KINDS,
              log: Callable[[str], None] = print) -> Result:
    """Hostile cases for ``seconds``; see the module's docstring."""
    seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    log(f"fuzz: seed {seed} ({seconds:.0f} s on {target.url}; replay with this seed)")
    rng = random.Random(seed)
    result = Result(seed=seed)
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        watch = _Watch(target, http)
        await watch.mark_logs()
        errors_before = await watch.worker_errors()
        busy = await watch.idle_within(IDLE_WITHIN_S)
        if busy:
            raise RuntimeError(f"the stack is not idle before the fuzz: {busy}")
        await _warm_up(target, http)
        busy = await watch.idle_within(5.0)
        if busy:
            raise RuntimeError(f"the stack is not idle after the warm-up: {busy}")
        watch.rss(result)
        n = 0
        while time.monotonic() - t0 < seconds:
            n += 1
            kind = rng.choice(kinds)
            case_seed = rng.randrange(2**32)
            case_rng = random.Random(case_seed)
            result.cases[kind] += 1
            name = f"case {n} ({kind}, case seed {case_seed})"
            try:
                if kind == "calls":
                    why, sent = await _calls_case(target, case_rng, http, result)
                else:
                    why, sent = await _hostile_session(target, case_rng, kind, result)
            except (OSError, websockets.WebSocketException, httpx.HTTPError) as exc:
                why, sent = f"{type(exc).__name__}: {exc}", []
            left = time.monotonic()
            if why:
                result.failures.append(f"{name}: {why}; sent {_summary(sent)}")
            dialect = "realtime" if kind == "calls" else kind
            served_s, not_served = await probe(target, dialect, left)
            result.sessions_opened += 1
            if served_s is not None and served_s <= SERVE_WITHIN_S:
                result.sessions_served += 1
                result.serve_s.append(served_s)
            else:
                late = f"served after {served_s:.2f} s" if served_s is not None else not_served
                result.failures.append(f"{name}: the next {dialect} session was not served within "
                                       f"{SERVE_WITHIN_S:.0f} s of the client leaving ({late}); sent {_summary(sent)}")
            busy = await watch.idle_within(IDLE_WITHIN_S)
            if busy:
                result.slots_held += 1
                result.failures.append(f"{name}: a slot still busy {IDLE_WITHIN_S:.0f} s after the clients left "
                                       f"({busy}); sent {_summary(sent)}")
                still = await watch.idle_within(RECOVER_S)
                if still:
                    result.stopped_early = f"after {name}, still busy {RECOVER_S:.0f} s later: {still}"
                    log(f"fuzz: stopping: {result.stopped_early}")
                    break
            watch.rss(result)
            if n % 20 == 0:
                log(f"fuzz: {n} cases, {result.events_sent:,} events, {len(result.failures)} failures, "
                    f"worker {result.rss_mb['worker'][-1:] or '?'} MB")
        result.seconds = time.monotonic() - t0
        with contextlib.suppress(httpx.HTTPError):
            result.worker_errors = await watch.worker_errors() - errors_before
        await watch.tracebacks(result)
        watch.rss(result)
    for name, text in result.first_traceback.items():
        log(f"fuzz: first traceback in the {name} log:\n{text}")
    return result


async def _warm_up(target: Target, http: httpx.AsyncClient) -> None:
    """What every process loads once, before the RSS baseline: a session of each dialect, and a
    call answered then hung up (the gateway imports aiortc, ~35 MB, with its first call)."""
    for dialect in ("realtime", "live"):
        served_s, why = await probe(target, dialect, time.monotonic())
        if served_s is None:
            raise RuntimeError(f"the stack does not serve a {dialect} session before the fuzz: {why}")
    r = await http.post(f"{target.url}/v1/realtime/calls", content=offer().encode(),
                        headers={"Content-Type": "application/sdp"})
    if r.status_code != 201:
        raise RuntimeError(f"a good offer was not answered before the fuzz: {r.status_code} {r.text[:200]}")
    await _hang_up(http, target, "/v1/realtime/calls", r)


def _summary(sent: list[str]) -> str:
    text = ", ".join(sent)
    return text if len(text) < 600 else text[:600] + "..."
