"""Questions heard as spoken: the same spoken question over a browser's WebRTC call (the OpenAI
Agents SDK for JavaScript in headless Chromium, an ephemeral key, as an app ships it) and over a
WebSocket session, side by side on one stack (issues 44, 69).

    python -m bench heard --prompts 40 --voices 4 --asks 1 --runs 1  # 40 calls, 40 WebSocket sessions
    python -m bench heard --prompts 10 --runs 1   # 20 calls and 20 WebSocket sessions (10 questions x 2), Piper only
    python -m bench heard --prompts 1 --runs 1    # a smoke run
    python -m bench heard --prompts 8 --voices 4 --keep /tmp/heard  # keep each trial's recorded input audio

Questions (``questions``), dev parts only: ``bench/sets/answers.py``'s ``DEV``, then
``bench/sets/duplex.py``'s ``dev`` and ``dev2`` ``complete`` phrases, then ``bench/sets/turns.py``'s
``DEV_COMPLETE`` (a phrase already taken is skipped), the first ``--prompts``. Voices
(``voices``), round-robin over the questions: the pipeline's Piper voice, then ``--voices`` - 1 of
``bench/sets/duplex.py``'s ``DEV_VOICES`` (espeak-ng). Each question comes after 4 s of silence,
as ``tests/e2e/test_agents_js.py`` asks it. The call: the SDK's page
(``tests/js/webrtc_page.html``), its app server minting the key (``devtools/browser_call.py``),
Chromium's fake microphone playing the WAV (the 24 kHz clip made 48 kHz with soxr) through its
capture processing (echo cancellation, noise suppression, gain control: the SDK asks for
``audio: true``), Opus to the gateway, and the SDK's default ``semantic_vad``. The WebSocket: the
same 24 kHz clip in 40 ms appends in real time, ``semantic_vad``. Both transcripts are the worker's
(``conversation.item.input_audio_transcription.completed``; on the call, the user item in the
SDK's history). Heard as spoken: the transcript's words are the question's (``bench.sets.canonical``:
case, punctuation, contractions, British spellings and number words aside).
Transports alternate per question; ``--asks`` (default 2) asks each question that many times per
transport a run. ``--runs`` repeats the whole set on one stack; the figure is the median share with
its spread. The report also gives each transport's share per voice, the words of the questions
each transport lost (not in the transcript), and the questions heard as spoken on one transport and
not on the other. ``--keep DIR`` records the sessions (the worker's recorder: the input audio as the
worker got it) and keeps them in ``DIR`` with ``rows.json`` and the clips sent.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import websockets

from bench.launch import Launched
from bench.sets import canonical
from bench.sets.answers import DEV
from bench.sets.duplex import DEV_VOICES, PARTS
from bench.sets.turns import DEV_COMPLETE as TURNS_DEV
from bench.stats import median_spread

KEY = "sk-bench-heard-0123456789"
LEAD_S = 4.0
RATE = 24000
CHUNK = RATE * 40 // 1000


PIPER = "piper"  # the pipeline's own voice (core/cascade/tts.py)


def questions(n: int) -> list[str]:
    """The first ``n`` dev questions: answers' ``DEV``, duplex's ``dev`` and ``dev2`` complete
    phrases, turns' ``DEV_COMPLETE``; a phrase once (by its canonical words)."""
    pool: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for text in [q.text for q in DEV] + PARTS["dev"]["complete"] + PARTS["dev2"]["complete"] + TURNS_DEV:
        key = tuple(canonical(text))
        if key not in seen:
            seen.add(key)
            pool.append(text)
    return pool[:n]


def voices(n: int) -> list[str | tuple[str, int, int]]:
    """Piper, then the first ``n`` - 1 of duplex's ``DEV_VOICES`` (espeak-ng: voice, wpm, pitch)."""
    return [PIPER, *DEV_VOICES[:max(0, n - 1)]]


def voice_name(voice: str | tuple[str, int, int]) -> str:
    return voice if isinstance(voice, str) else voice[0]


def speak(tts, text: str, voice: str | tuple[str, int, int]) -> np.ndarray:
    """``text`` in ``voice``: PCM16 mono at 24 kHz."""
    if voice == PIPER:
        return np.frombuffer(b"".join(tts.synthesize(text, deterministic=True)), "<i2")
    from devtools.espeak import espeak

    name, wpm, pitch = voice
    return espeak(text, name, wpm, pitch, rate=RATE)


def call_wav(path: Path, pcm: np.ndarray, total_s: float = 40.0) -> Path:
    """The clip as Chromium's fake microphone plays it: 48 kHz (soxr), ``LEAD_S`` of silence first."""
    import soxr

    from devtools.browser_call import WAV_RATE, write_wav

    speech = soxr.resample(pcm.astype(np.float32), RATE, WAV_RATE)
    lead = int(LEAD_S * WAV_RATE)
    audio = np.zeros(max(int(total_s * WAV_RATE), lead + speech.size + 3 * WAV_RATE), np.float32)
    audio[lead:lead + speech.size] = speech
    return write_wav(path, audio)


def words_lost(text: str, heard: str) -> list[str]:
    """The question's words (canonical) not in what was heard."""
    got = set(canonical(heard))
    return [w for w in canonical(text) if w not in got]


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
    from devtools.browser_call import AgentsApp

    runs, asks = args.runs or 3, getattr(args, "asks", None) or 2
    qs = questions(max(1, args.prompts))
    vs = voices(getattr(args, "voices", None) or 1)
    keep: Path | None = getattr(args, "keep", None)
    tts = PiperTts()
    app = AgentsApp(KEY)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="omniduplex-heard-") as tmp:
        tmpdir = Path(tmp)
        clips = [(q, vs[k % len(vs)], speak(tts, q, vs[k % len(vs)])) for k, q in enumerate(qs)]
        wavs = [call_wav(tmpdir / f"q{k}.wav", pcm) for k, (_, _, pcm) in enumerate(clips)]
        with Launched(tmpdir / "stack", workers=1, recording={"enabled": keep is not None},
                      auth={"api_keys": [KEY], "allowed_origins": [app.origin],
                            "per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            app.gateway = launched.url
            ws_url = launched.ws_url + "?model=omniduplex-cascade"
            for run in range(runs):
                for k, (q, voice, pcm) in enumerate(clips):
                    for repeat in range(asks):
                        order = ("webrtc", "websocket") if (k + repeat + run) % 2 == 0 else ("websocket", "webrtc")
                        for transport in order:
                            wait_idle(launched)
                            started = time.time()
                            if transport == "webrtc":
                                heard = call_trial(app, launched.url, wavs[k], tmpdir / f"profile{run}-{k}-{repeat}")
                            else:
                                heard = asyncio.run(ws_trial(ws_url, pcm))
                            row = {"run": run, "transport": transport, "question": q, "clip": k,
                                   "voice": voice_name(voice), "heard": heard, "started": round(started, 3),
                                   "as_spoken": heard is not None and canonical(heard) == canonical(q),
                                   "words": words_heard(q, heard or ""), "lost": words_lost(q, heard or "")}
                            rows.append(row)
                            print(json.dumps(row), flush=True)
            if keep is not None:
                from core import media

                keep.mkdir(parents=True, exist_ok=True)
                time.sleep(2.0)  # the last session's recording is finished
                shutil.copytree(launched.data / "sessions", keep / "sessions", dirs_exist_ok=True)
                for k, (_, _, pcm) in enumerate(clips):
                    media.write_wav(keep / f"q{k}.wav", pcm, RATE)
                (keep / "rows.json").write_text(json.dumps(rows, indent=1))
    app.close()
    return summarize(rows, runs, len(qs), [voice_name(v) for v in vs], asks)


def summarize(rows: list[dict[str, Any]], runs: int, n_questions: int, voice_names: list[str],
              asks: int = 2) -> dict[str, Any]:
    """Per transport: the share heard as spoken (median over runs), the share of words, the share
    per voice (all runs), the words lost (with counts) and the misheard; and the questions heard
    as spoken on one transport only (every ask of every run)."""
    summary: dict[str, Any] = {}
    for transport in ("webrtc", "websocket"):
        mine = [r for r in rows if r["transport"] == transport]
        per_run = [[r for r in mine if r["run"] == run] for run in range(runs)]
        lost = Counter(w for r in mine for w in r.get("lost", words_lost(r["question"], r["heard"] or "")))
        summary[transport] = {
            "trials": len(mine),
            "heard_as_spoken": sum(r["as_spoken"] for r in mine),
            "as_spoken": median_spread([round(sum(r["as_spoken"] for r in p) / len(p), 3) for p in per_run if p]),
            "words": median_spread([round(float(np.mean([r["words"] for r in p])), 3) for p in per_run if p]),
            "by_voice": {v: {"trials": len(vr), "as_spoken": round(sum(r["as_spoken"] for r in vr) / len(vr), 3)}
                         for v in voice_names if (vr := [r for r in mine if r.get("voice", PIPER) == v])},
            "lost": dict(sorted(lost.items(), key=lambda kv: (-kv[1], kv[0]))),
            "misheard": sorted({f"{r['question']} -> {r['heard']}" for r in mine if not r["as_spoken"]}),
        }
    asked = sorted({r["question"] for r in rows})
    spoken = {t: {q for q in asked if all(r["as_spoken"] for r in rows if r["transport"] == t and r["question"] == q)}
              for t in ("webrtc", "websocket")}
    only = {"webrtc": sorted(spoken["webrtc"] - spoken["websocket"]),
            "websocket": sorted(spoken["websocket"] - spoken["webrtc"])}
    return {"runs": runs, "questions": n_questions, "asks": asks, "voices": voice_names, "rows": rows,
            "summary": summary, "only": only, "gap": len(only["websocket"]) - len(only["webrtc"])}


def report(r: dict[str, Any]) -> str:
    voice_names = r.get("voices", [PIPER])
    lines = [f"Questions heard as spoken ({r['questions']} questions in {len(voice_names)} voices, round-robin; "
             f"each asked {r.get('asks', 2)}x per transport a run, {r['runs']} runs; median (min-max) over runs):", "",
             "| transport | trials | heard as spoken | share | words heard | " + " | ".join(voice_names) + " |",
             "|---|---|---|---|---|" + "---|" * len(voice_names)]
    for transport, s in r["summary"].items():
        per_voice = [str(s["by_voice"][v]["as_spoken"]) if v in s["by_voice"] else "-" for v in voice_names]
        lines.append(f"| {transport} | {s['trials']} | {s['heard_as_spoken']} | {s['as_spoken']['text']} | "
                     f"{s['words']['text']} | " + " | ".join(per_voice) + " |")
    lines += ["", f"Questions heard as spoken on one transport only (every ask): WebSocket only "
                  f"{len(r['only']['websocket'])}, WebRTC only {len(r['only']['webrtc'])} "
                  f"(WebRTC behind by {r['gap']})."]
    for transport, s in r["summary"].items():
        lost = ", ".join(f"{w} x{n}" if n > 1 else w for w, n in s["lost"].items()) or "none"
        lines.append(f"- {transport} lost words: {lost}")
    for transport, s in r["summary"].items():
        for m in s["misheard"]:
            lines.append(f"- {transport}: {m}")
    return "\n".join(lines)
