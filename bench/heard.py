"""Questions heard as spoken: the same spoken question over a browser's WebRTC call (the OpenAI
Agents SDK for JavaScript in headless Chromium, an ephemeral key, as an app ships it) and over a
WebSocket session, side by side on one stack (issue 44).

    python -m bench heard --prompts 10 --runs 1   # 20 calls and 20 WebSocket sessions (10 questions x 2)
    python -m bench heard --prompts 1 --runs 1    # a smoke run

Each question (``bench/sets/answers.py``'s ``dev`` part, spoken by the pipeline's Piper voice)
comes after 4 s of silence, as ``tests/e2e/test_agents_js.py`` asks it. The call: the SDK's page
(``tests/js/webrtc_page.html``), its app server minting the key (``devtools/browser_call.py``),
Chromium's fake microphone playing the WAV through its capture processing (echo cancellation,
noise suppression, gain control: the SDK asks for ``audio: true``), Opus to the gateway, and the
SDK's default ``semantic_vad``. The WebSocket: the same 24 kHz clip in 40 ms appends in real time,
``semantic_vad``. Both transcripts are the worker's (``conversation.item.input_audio_transcription
.completed``; on the call, the user item in the SDK's history). Heard as spoken: the transcript's
words are the question's (``bench.sets.canonical``: case, punctuation, contractions, British
spellings and number words aside).
Transports alternate per question. ``--runs`` repeats the whole set on one stack; the figure is
the median share with its spread.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import websockets

from bench.launch import Launched
from bench.sets import canonical
from bench.sets.answers import DEV
from bench.stats import median_spread

KEY = "sk-bench-heard-0123456789"
LEAD_S = 4.0
RATE = 24000
CHUNK = RATE * 40 // 1000


def words_heard(text: str, heard: str) -> float:
    """The share of the question's words found in what was heard."""
    said, got = canonical(text), set(canonical(heard))
    return sum(w in got for w in said) / max(1, len(said))


async def ws_trial(url: str, pcm: np.ndarray) -> str | None:
    """The clip over a WebSocket session (semantic_vad); the worker's transcript of the turn."""
    audio = np.concatenate([np.zeros(int(LEAD_S * RATE), np.int16), pcm, np.zeros(3 * RATE, np.int16)])
    async with websockets.connect(url, max_size=None, additional_headers={"Authorization": f"Bearer {KEY}"},
                                  open_timeout=120) as ws:
        while json.loads(await ws.recv())["type"] != "session.created":
            pass
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"], "max_output_tokens": 8,
            "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}}))

        async def send() -> None:
            t0 = time.monotonic()
            for n, i in enumerate(range(0, audio.size, CHUNK)):
                await asyncio.sleep(max(0.0, t0 + (n + 1) * 0.04 - time.monotonic()))
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(audio[i:i + CHUNK].tobytes()).decode()}))

        sender = asyncio.create_task(send())
        try:
            deadline = time.monotonic() + LEAD_S + pcm.size / RATE + 15
            while time.monotonic() < deadline:
                try:
                    ev = json.loads(await asyncio.wait_for(ws.recv(), 1.0))
                except asyncio.TimeoutError:
                    continue
                if ev["type"] == "conversation.item.input_audio_transcription.completed":
                    return ev.get("transcript", "")
            return None
        finally:
            sender.cancel()


def call_trial(app, gateway: str, wav: Path, profile: Path) -> str | None:
    """The question on an Agents SDK call in Chromium; the user's words in the SDK's history."""
    from devtools.browser_call import chromium, sdk_call_results

    driver = chromium(wav, profile)
    try:
        driver.get(f"{app.origin}/?gateway={gateway}")
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            r = sdk_call_results(driver)
            if r.get("failure"):
                return None
            users = [h["text"] for h in r.get("history", []) if h["role"] == "user" and h["text"].strip()]
            if users:
                return users[-1]
            time.sleep(0.25)
        return None
    finally:
        try:
            driver.execute_script("window.__session && window.__session.close()")
        finally:
            driver.quit()


def wait_idle(launched: Launched, timeout: float = 15.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        h = httpx.get(f"{launched.url}/health", timeout=5).json()
        if not h["slots_busy"] and not h["queue_length"]:
            return
        time.sleep(0.1)


def run_cli(args) -> dict[str, Any]:
    from core.cascade.tts import PiperTts
    from devtools.browser_call import AgentsApp, spoken_wav

    runs, prompts = args.runs or 3, min(args.prompts, len(DEV))
    questions = [q.text for q in DEV[:prompts]]
    tts = PiperTts()
    app = AgentsApp(KEY)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="omniduplex-heard-") as tmp:
        tmpdir = Path(tmp)
        wavs = {q: spoken_wav(tmpdir / f"q{i}.wav", tts, q, lead_s=LEAD_S, total_s=40.0) for i, q in enumerate(questions)}
        pcms = {q: np.frombuffer(b"".join(tts.synthesize(q, deterministic=True)), "<i2") for q in questions}
        with Launched(tmpdir / "stack", workers=1, recording={"enabled": False},
                      auth={"api_keys": [KEY], "allowed_origins": [app.origin],
                            "per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            app.gateway = launched.url
            ws_url = launched.ws_url + "?model=omniduplex-cascade"
            for run in range(runs):
                for k, q in enumerate(questions):
                    for repeat in range(2):
                        order = ("webrtc", "websocket") if (k + repeat + run) % 2 == 0 else ("websocket", "webrtc")
                        for transport in order:
                            wait_idle(launched)
                            if transport == "webrtc":
                                heard = call_trial(app, launched.url, wavs[q], tmpdir / f"profile{run}-{k}-{repeat}")
                            else:
                                heard = asyncio.run(ws_trial(ws_url, pcms[q]))
                            row = {"run": run, "transport": transport, "question": q, "heard": heard,
                                   "as_spoken": heard is not None and canonical(heard) == canonical(q),
                                   "words": words_heard(q, heard or "")}
                            rows.append(row)
                            print(json.dumps(row), flush=True)
    app.close()
    summary: dict[str, Any] = {}
    for transport in ("webrtc", "websocket"):
        per_run = [[r for r in rows if r["transport"] == transport and r["run"] == run] for run in range(runs)]
        summary[transport] = {
            "trials": sum(len(p) for p in per_run),
            "as_spoken": median_spread([round(sum(r["as_spoken"] for r in p) / len(p), 3) for p in per_run if p]),
            "words": median_spread([round(float(np.mean([r["words"] for r in p])), 3) for p in per_run if p]),
            "misheard": sorted({f"{r['question']} -> {r['heard']}" for p in per_run for r in p if not r["as_spoken"]}),
        }
    return {"runs": runs, "questions": len(questions), "rows": rows, "summary": summary}


def report(r: dict[str, Any]) -> str:
    lines = [f"Questions heard as spoken ({r['questions']} questions x 2 per transport a run, {r['runs']} runs; "
             "median (min-max) over runs):", "",
             "| transport | trials | heard as spoken | words heard |", "|---|---|---|---|"]
    for transport, s in r["summary"].items():
        lines.append(f"| {transport} | {s['trials']} | {s['as_spoken']['text']} | {s['words']['text']} |")
    for transport, s in r["summary"].items():
        for m in s["misheard"]:
            lines.append(f"- {transport}: {m}")
    return "\n".join(lines)
