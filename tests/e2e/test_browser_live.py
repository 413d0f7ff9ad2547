"""The audio duplex page in OpenAI's Live dialect (issue 48, item 4), in a real browser: headless
Chromium whose fake microphone asks "What is the capital of France?", against real worker and
gateway processes (the cascade backend).

The page's "Dialect" choice, Live, opens ``/v1/live/sessions``: ``session.start``, the microphone
as ``session.input_audio.append``, the reply's paced ``session.output_audio.delta`` played by the
page's player (WebSocket) or on the call's track (WebRTC, the JSON offer of ``client.live.create``),
the Live transcripts shown as the user's and the assistant's; nothing of Realtime's is sent
(no ``session.update``, truncate, cancel or clear); Stop sends ``session.close`` and the session
ends with ``session.closed``.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest

from tests.support.browser import dump_console, require_browser, spoken_wav, wait_until

require_browser()

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402

# Realtime's client events that a Live page must never send (the server paces and stops the reply).
NOT_LIVE = ("session.update", "conversation.item.truncate", "response.cancel", "output_audio_buffer.clear",
            "input_audio_buffer.append", "input_audio_buffer.commit", "response.create")


@pytest.fixture
def question_wav(tmp_path, tts) -> Path:
    """1 s silence, the spoken question, silence to 14 s: the fake device's loop asks again only
    after the answer has played, even on a busy machine."""
    return spoken_wav(tmp_path / "question.wav", tts, "What is the capital of France?", total_s=14.0)


def snapshot(driver) -> dict | None:
    return driver.execute_script(
        "const o = window.omni; return o ? {state: o.state, dialect: o.dialect, transport: o.transport,"
        " playedMs: o.playedMs, transcripts: o.transcripts, error: o.error, sentEvents: o.sentEvents,"
        " liveDropped: o.liveDropped, liveClosed: o.liveClosed, callId: o.callId, levels: o.levels} : null;")


def answered(snap: dict | None) -> bool:
    """The user's question and an assistant entry with "Paris" shown, and reply audio played."""
    if not snap:
        return False
    user = [t["text"].lower() for t in snap["transcripts"] if t["role"] == "user"]
    assistant = [t["text"].lower() for t in snap["transcripts"] if t["role"] == "assistant"]
    return (any("capital" in u and "france" in u for u in user) and any("paris" in a for a in assistant)
            and snap["playedMs"] > 500)


def wait_for_snapshot(browser, predicate, timeout: float = 90.0) -> dict | None:
    deadline = time.monotonic() + timeout
    snap = snapshot(browser)
    while not predicate(snap) and time.monotonic() < deadline:
        time.sleep(0.25)
        snap = snapshot(browser)
    return snap


@contextlib.contextmanager
def live_page(browser, stack):
    """The browser console on failure; the session stopped after, until its slot is free."""
    try:
        yield
    except BaseException:
        dump_console(browser)
        raise
    finally:
        browser.execute_script("window.omni && window.omni.session && window.omni.session.stop()")
        wait_until(lambda: stack.health()["slots_busy"] == 0, timeout=10)


def start_live(launch, stack, wav: Path, transport: str, key: str | None = None):
    """The duplex page with ``wav`` as the microphone, Dialect Live over ``transport``, Start pressed
    (with ``key`` stored in the browser, as the page keeps one for a service that needs it)."""
    browser = launch(wav)
    browser.get(f"{stack.url}/audio_duplex.html")
    if key:
        browser.execute_script("localStorage.setItem('omniduplex.apiKey', arguments[0])", key)
    dialect = Select(browser.find_element(By.ID, "dialect"))
    assert dialect.first_selected_option.text == "Realtime"  # the default
    assert [o.text for o in dialect.options] == ["Realtime", "Live"]
    dialect.select_by_value("live")
    assert not browser.find_element(By.ID, "turn-detection").is_enabled()  # in Live the model decides
    Select(browser.find_element(By.ID, "transport")).select_by_value(transport)
    browser.find_element(By.ID, "start").click()
    return browser


def check_live_exchange(browser, stack, snap: dict) -> None:
    """What both transports share: the page spoke Live only, showed no error, and Stop closed the
    session with session.close -> session.closed."""
    assert answered(snap), f"the page never completed a Live voice exchange: {json.dumps(snap, indent=1)}"
    assert snap["dialect"] == "live", snap
    sent = snap["sentEvents"]
    assert sent.get("session.start") == (1 if snap["transport"] == "websocket" else None), sent
    assert not [t for t in NOT_LIVE if t in sent], sent
    assert snap["error"] is None, snap["error"]
    assert not browser.find_element(By.ID, "alert").is_displayed(), browser.find_element(By.ID, "alert").text
    assert not browser.find_element(By.ID, "dialect").is_enabled()  # chosen per session: locked while it runs

    browser.find_element(By.ID, "stop").click()
    assert wait_until(lambda: browser.execute_script("return window.omni.state") == "closed", timeout=10)
    end = snapshot(browser)
    assert end["sentEvents"].get("session.close") == 1, end["sentEvents"]
    assert end["liveClosed"] == "close_requested", end
    assert wait_until(lambda: stack.health()["slots_busy"] == 0, timeout=10)
    assert not browser.find_element(By.ID, "alert").is_displayed(), browser.find_element(By.ID, "alert").text
    assert end["error"] is None, end["error"]
    assert browser.find_element(By.ID, "dialect").is_enabled()


def test_duplex_page_runs_a_live_session_over_websocket(stack, launch, question_wav):
    """Live over the WebSocket: the spoken question is shown as the user's, the answer (with
    "Paris") as the assistant's, its audio played by the page's player, each turn its own entry;
    the choice is kept. A key stored in the browser goes as the subprotocol
    ``openai-insecure-api-key.<key>`` (an open service ignores it), which the socket must answer."""
    browser = start_live(launch, stack, question_wav, "websocket", key="sk-browser-live-0123")
    started = time.monotonic()
    with live_page(browser, stack):
        snap = wait_for_snapshot(browser, answered)
        print(f"Live over WebSocket answered in {time.monotonic() - started:.1f} s: {json.dumps(snap)}")
        assert snap["transport"] == "websocket" and snap["callId"] is None, snap
        assert browser.execute_script("return window.omni.session.ws.protocol") == "realtime"
        assert snap["sentEvents"].get("session.input_audio.append", 0) > 20, snap["sentEvents"]
        # The fake microphone asks again 14 s in: a Live stream has no item ids, so the page makes
        # the entries itself, a new one for each side's turn (none merged into the one before).
        snap = wait_for_snapshot(browser, lambda s: bool(s and len(s["transcripts"]) >= 4 and "paris" in (
            s["transcripts"][3]["text"].lower())), timeout=60)
        roles = [t["role"] for t in snap["transcripts"]]
        assert roles[:4] == ["user", "assistant", "user", "assistant"], snap["transcripts"]
        for t in snap["transcripts"][:4]:
            word = "capital" if t["role"] == "user" else "paris"
            assert t["text"].lower().count(word) == 1, snap["transcripts"]
        check_live_exchange(browser, stack, snap)

        browser.get(f"{stack.url}/audio_duplex.html")  # kept in this browser for the next visit
        assert Select(browser.find_element(By.ID, "dialect")).first_selected_option.text == "Live"


def test_duplex_page_runs_a_live_session_over_webrtc(stack, launch, question_wav):
    """Live over WebRTC: the offer goes as client.live.create's JSON body to POST /v1/live/sessions;
    the microphone and the reply ride the call's tracks, the Live events its data channel."""
    browser = start_live(launch, stack, question_wav, "webrtc")
    started = time.monotonic()
    with live_page(browser, stack):
        snap = wait_for_snapshot(browser, answered)
        print(f"Live over WebRTC answered in {time.monotonic() - started:.1f} s: {json.dumps(snap)}")
        assert snap["transport"] == "webrtc" and (snap["callId"] or "").startswith("sess_"), snap
        assert "session.input_audio.append" not in snap["sentEvents"], snap["sentEvents"]  # on the track
        check_live_exchange(browser, stack, snap)
