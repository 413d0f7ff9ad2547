"""Where each turn's time went (issue 36), in headless Chromium against a real gateway and worker.

- The session viewer draws a waterfall per turn from the recording's ``turn_metrics`` stages (a
  recording written here by the worker's own recorder: a spoken turn with all four stages, a typed
  turn with only LLM and TTS, a spoken turn the user interrupted): segments in the waterfall's
  order, widths proportional to their milliseconds on one scale for all turns, labels and
  tooltips, a legend, the interrupted turn marked. A screenshot (the test's tmp dir) holds each
  stage's colour.
- The admin page's "Where turns' time goes (last hour)" table after real typed turns through the
  stack: the gateway read their stages from the worker's ``session.metrics`` (its real parse) and
  the table's p50/p90 and counts are those of the stages the client received.
"""

from __future__ import annotations

import base64
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from core.session_store import new_share_token, token_hash
from tests.support.browser import dump_console, require_browser, screenshot_both, silence_wav, wait_until
from tests.support.realtime_client import Client
from tests.support.stack import Stack

require_browser()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A stack of its own, not the browser modules' shared one: the admin page's stage times are
    the last hour's, and this module's test asserts exactly its own three turns."""
    s = Stack(tmp_path_factory.mktemp("waterfall_stack"), workers=1).start()
    yield s
    s.stop()

# static/viewer/waterfall.css: each stage's colour, looked for in the screenshot
COLOURS = {"end_of_turn": (0xF0, 0xA0, 0x20), "asr": (0xB0, 0x7C, 0xFF), "llm": (0x4F, 0x8C, 0xFF),
           "tts": (0x2F, 0xBF, 0x71)}
SPOKEN = {"end_of_turn_ms": 400.0, "asr_ms": 300.0, "llm_ms": 500.0, "tts_ms": 300.0}  # 1500 ms: the scale
TYPED = {"end_of_turn_ms": None, "asr_ms": None, "llm_ms": 600.0, "tts_ms": 200.0}
CUT = {"end_of_turn_ms": 200.0, "asr_ms": 250.0, "llm_ms": 450.0, "tts_ms": 100.0}
STAGE_ORDER = ["end_of_turn", "asr", "llm", "tts"]


def waterfall_session(stack) -> str:
    """A recording made by the worker's recorder: a spoken turn, a typed one, an interrupted spoken
    one, each with the worker's session.metrics. Returns the viewer's share URL."""
    from worker.recorder import RecorderPool

    token = new_share_token()
    pool = RecorderPool(stack.data_dir)
    sid = "sess_" + "cd" * 16
    rec = pool.open(sid, {"app": "audio_duplex", "model": "omniduplex-cascade",
                          "share_token_sha256": token_hash(token)})

    def at(ms: float) -> None:
        rec.t0 = time.monotonic() - ms / 1000

    def pcm(seconds: float, period: float) -> str:
        wave = (0.3 * np.sin(np.arange(int(24000 * seconds)) / period) * 32767).astype("<i2").tobytes()
        return base64.b64encode(wave).decode()

    def say(ms: float, seconds: float) -> None:
        at(ms)
        rec.client_event({"type": "input_audio_buffer.append", "audio": pcm(seconds, 6)}, 24000)
        rec.client_event({"type": "input_audio_buffer.commit"}, 24000)

    def reply(ms: float, response: str, item: str, seconds: int) -> None:
        at(ms)
        rec.server_event({"type": "response.created", "response": {"id": response}})
        for n in range(seconds):
            at(ms + n * 1000)
            rec.server_event({"type": "response.output_audio.delta", "response_id": response, "item_id": item,
                              "delta": pcm(1.0, 9)})

    def done(ms: float, response: str, item: str, stages: dict, status: str = "completed") -> None:
        at(ms)
        cut = status == "cancelled"
        r = {"id": response, "status": status, "status_details": {"reason": "turn_detected"} if cut else None,
             "output": [{"id": item, "content": [{"transcript": f"Reply {response}."}]}]}
        rec.server_event({"type": "response.done", "response": r})
        rec.server_event({"type": "session.metrics", "metrics": {
            "response_id": response, "ttft_ms": stages["llm_ms"], "ttfp_ms": stages["llm_ms"] + stages["tts_ms"],
            "v2v_ms": None if stages["asr_ms"] is None else sum(stages.values()), "e2e_ms": 2000.0,
            "audio_ms": 1000.0, "status": status, "interrupted": cut, "start_epoch": time.time(), "stages": stages}})

    say(500, 1.5)
    at(1900)
    rec.server_event({"type": "conversation.item.input_audio_transcription.completed", "item_id": "item_u1",
                      "transcript": "What is the capital of France?"})
    reply(3000, "resp_spoken", "item_a", 2)
    done(5000, "resp_spoken", "item_a", SPOKEN)
    at(6000)
    rec.client_event({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "And of Spain?"}]}}, 24000)
    reply(6800, "resp_typed", "item_b", 2)
    done(8800, "resp_typed", "item_b", TYPED)
    say(9000, 1.5)
    reply(11000, "resp_cut", "item_c", 3)
    at(12500)
    rec.server_event({"type": "input_audio_buffer.speech_started", "item_id": "item_u3", "audio_start_ms": 12400})
    done(12510, "resp_cut", "item_c", CUT, "cancelled")
    at(14000)
    rec.finish("client_closed", 1000).result(timeout=60)
    pool.shutdown()
    return f"/s/{sid}?token={token}"


WATERFALL_DOM = """
const rows = [...document.querySelectorAll('#waterfall .wf-row')];
return {
  rows: rows.map((r) => ({
    cls: r.className, response: r.dataset.responseId, turn: r.dataset.turn,
    track: r.querySelector('.wf-track').getBoundingClientRect().width,
    head: r.querySelector('.wf-head').textContent,
    barTitle: r.querySelector('.wf-bar').title,
    cut: [...r.querySelectorAll('.wf-interrupted')].map((c) => c.textContent),
    segs: [...r.querySelectorAll('.wf-seg')].map((s) => ({stage: s.dataset.stage, ms: Number(s.dataset.ms),
      width: s.getBoundingClientRect().width, label: s.textContent, title: s.title,
      colour: getComputedStyle(s).backgroundColor})),
  })),
  legend: document.querySelector('.wf-legend').textContent,
  swatches: [...document.querySelectorAll('.wf-legend .wf-swatch')].map((s) => s.className),
};"""


def test_viewer_draws_each_turns_waterfall(stack, launch, tmp_path):
    share_url = waterfall_session(stack)
    browser = launch(silence_wav(tmp_path / "quiet.wav", 1.0))
    try:
        browser.get(f"{stack.url}{share_url}")
        viewer = wait_until(lambda: browser.execute_script(
            "return window.viewer && window.viewer.ready && window.viewer"), timeout=30)
        assert viewer and not viewer["error"], viewer
        got = [(w["response_id"], w["turn"], w["interrupted"], w["total_ms"]) for w in viewer["waterfalls"]]
        assert got == [("resp_spoken", 1, False, 1500), ("resp_typed", 2, False, 800), ("resp_cut", 3, True, 1000)], got
        assert viewer["waterfalls"][1]["stages"] == {"end_of_turn": None, "asr": None, "llm": 600, "tts": 200}

        dom = browser.execute_script(WATERFALL_DOM)
        rows = dom["rows"]
        assert [r["response"] for r in rows] == ["resp_spoken", "resp_typed", "resp_cut"], rows
        # Segments in the waterfall's order; a stage that did not happen has none.
        assert [s["stage"] for s in rows[0]["segs"]] == STAGE_ORDER, rows[0]
        assert [s["stage"] for s in rows[1]["segs"]] == ["llm", "tts"], rows[1]
        assert [s["stage"] for s in rows[2]["segs"]] == STAGE_ORDER, rows[2]
        # One scale for all turns: each segment's width is its ms over the longest turn's 1500 ms.
        track = rows[0]["track"]
        assert track > 150, rows[0]
        for r in rows:
            assert abs(r["track"] - track) < 0.5, rows
            for s in r["segs"]:
                assert abs(s["width"] - s["ms"] / 1500 * track) <= 1.0, (r["response"], s, track)
        assert abs(sum(s["width"] for s in rows[0]["segs"]) - track) <= 1.0
        assert abs(sum(s["width"] for s in rows[1]["segs"]) - track * 800 / 1500) <= 1.0
        # Labels and tooltips carry the milliseconds; each stage has its own colour.
        assert [s["label"] for s in rows[0]["segs"]] == ["400", "300", "500", "300"], rows[0]
        assert [s["title"].split(" (")[0] for s in rows[0]["segs"]] == [
            "End of turn: 400 ms", "ASR: 300 ms", "LLM: 500 ms", "TTS: 300 ms"], rows[0]
        assert rows[1]["barTitle"] == "LLM 600 ms → TTS 200 ms", rows[1]
        assert [s["colour"] for s in rows[0]["segs"]] == [f"rgb({r}, {g}, {b})" for r, g, b in COLOURS.values()]
        assert "1500 ms" in rows[0]["head"] and "800 ms" in rows[1]["head"], rows
        # The interrupted turn, and only it, is marked.
        assert "interrupted" in rows[2]["cls"].split() and rows[2]["cut"] == ["interrupted"], rows[2]
        assert all("interrupted" not in r["cls"].split() and not r["cut"] for r in rows[:2]), rows
        for word in ("End of turn", "ASR", "LLM", "TTS", "Interrupted"):
            assert word in dom["legend"], dom["legend"]
        assert [c.split()[-1] for c in dom["swatches"]] == STAGE_ORDER + ["interrupted"], dom["swatches"]

        # The screenshot shows the bars: every stage's colour, in proportion.
        browser.execute_script("document.getElementById('waterfall').scrollIntoView({block: 'center'})")
        shot = tmp_path / "viewer_waterfall.png"
        browser.save_screenshot(str(shot))
        pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
        counts = {stage: int((np.abs(pixels - rgb).max(axis=1) <= 2).sum()) for stage, rgb in COLOURS.items()}
        print(f"screenshot {shot}: stage colour pixels {counts}")
        assert len(np.unique(pixels, axis=0)) > 50, "the screenshot is blank"
        # ms per stage over the three turns: end_of_turn 600, asr 550, llm 1550, tts 600 (the
        # end_of_turn colour is also the legend's and the timeline's amber: at least its share)
        per_ms = counts["llm"] / 1550
        assert per_ms * track > 5, counts  # the bars are drawn, a few px high at least
        for stage, ms in (("asr", 550), ("tts", 600), ("end_of_turn", 600)):
            assert counts[stage] >= 0.7 * per_ms * ms, (stage, counts)
        problems = screenshot_both(browser, tmp_path, "viewer_waterfall")
        assert not problems, problems
    except BaseException:
        dump_console(browser)
        raise


STAGE_TABLE = """
return [...document.querySelectorAll('#stages tbody tr')].map((r) => [r.dataset.stage,
  ...[...r.cells].map((c) => c.textContent)]);"""


def percentile(values: list[float], q: float) -> float | None:
    """gateway/metrics.py's: the sorted values' index round(q * (n - 1))."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))] if v else None


async def test_admin_page_shows_the_last_hours_stage_times(stack, launch, tmp_path):
    received = []
    c = await Client.open(stack, query="&extensions=session.metrics", extensions=frozenset({"session.metrics"}))
    try:
        for n, text in enumerate(("Say hello.", "Say yes.", "Say no.")):
            await c.typed(text)
            await c.respond()
            received.append((await c.until("session.metrics", count=n + 1))["metrics"]["stages"])
    finally:
        await c.close()
    assert all(s["end_of_turn_ms"] is None and s["asr_ms"] is None for s in received), received  # typed
    assert all(isinstance(s["llm_ms"], (int, float)) and isinstance(s["tts_ms"], (int, float)) for s in received)

    browser = launch(silence_wav(tmp_path / "s.wav", 1.0))
    try:
        browser.get(f"{stack.url}/admin?token={stack.admin_token}")
        rows = wait_until(lambda: (r := browser.execute_script(STAGE_TABLE)) and len(r) == 4 and r, timeout=15)
        assert rows, browser.execute_script("return window.admin")
        ms = lambda v: "–" if v is None else str(round(v + 1e-9))  # noqa: E731 - as the page rounds
        want = [["end_of_turn", "End of turn", "–", "–", "0"], ["asr", "ASR", "–", "–", "0"]]
        for stage, name in (("llm", "LLM"), ("tts", "TTS")):
            values = [round(s[f"{stage}_ms"], 1) for s in received]
            want.append([stage, name, ms(percentile(values, 0.5)), ms(percentile(values, 0.9)), "3"])
        assert rows == want, (rows, received)
        heading = browser.execute_script("return document.getElementById('stages-title').textContent")
        assert heading == "Where turns' time goes (last hour)"
        overview = browser.execute_script("return window.admin.overview.stages")
        assert [s["stage"] for s in overview] == STAGE_ORDER and overview[2]["count"] == 3, overview
        api = httpx.get(f"{stack.url}/api/admin/stages", headers={"Authorization": f"Bearer {stack.admin_token}"})
        assert api.json() == {"window_s": 3600.0, "stages": overview}, api.text
        assert httpx.get(f"{stack.url}/api/admin/stages").status_code == 401
        browser.execute_script("document.getElementById('stages').scrollIntoView({block: 'center'})")
        problems = screenshot_both(browser, tmp_path, "admin_stages")
        assert not problems, problems
    except BaseException:
        dump_console(browser)
        raise
