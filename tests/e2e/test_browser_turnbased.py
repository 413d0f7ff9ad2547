"""The turn-based chat page in headless Chromium, against real worker and gateway processes.

Typed text, voice clips from the fake microphone (hold and toggle), an image from the file
picker, Save & share opened in a second browser, the queue and its errors, and a worker failure
followed by a new session; state is read through the page's read-only ``window.omni``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.browser import (
    BUSY,
    WAV_RATE,
    dump_console,
    open_chat,
    require_browser,
    screenshot_both,
    send_text,
    silence_wav,
    snapshot,
    speech_48k,
    wait_until,
    write_wav,
)
from tests.support.stack import Stack

require_browser()

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By


ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"


@pytest.fixture
def silence(tmp_path) -> Path:
    return silence_wav(tmp_path / "silence.wav")


def answers(snap: dict | None) -> list[str]:
    return [m["text"].strip() for m in (snap or {}).get("messages", []) if m["role"] == "assistant"]


def wait_for_answer(browser, count: int = 1, played_ms: float = 0, timeout: float = 120) -> dict:
    """Until ``count`` non-empty answers are in, the page is idle and ``played_ms`` of audio played."""
    def ready():
        snap = snapshot(browser)
        done = (snap and len([a for a in answers(snap) if a]) >= count and snap["state"] not in BUSY
                and snap["playedMs"] >= played_ms)
        return snap if done else None

    snap = wait_until(ready, timeout)
    assert snap, f"no answer: {json.dumps(snapshot(browser), indent=1)}"
    return snap


def test_typed_question_streams_text_and_plays_audio(stack, launch, silence, tmp_path):
    browser = open_chat(launch, stack, silence)
    try:
        send_text(browser, QUESTION)
        snap = wait_for_answer(browser, played_ms=500)
        assert snap["messages"][0] == {"role": "user", "text": QUESTION}
        assert snap["deltaCount"] > 1, "the answer arrived in one piece, not streamed"
        assert not snap["alert"], snap["alert"]
        assert browser.find_element(By.ID, "input").get_attribute("value") == ""
        print(f"answer: {answers(snap)[0]!r}; played {snap['playedMs']:.0f} ms")
        problems = screenshot_both(browser, tmp_path, "chat")
        assert not problems, problems
    except BaseException:
        dump_console(browser)
        raise


def test_voice_clips_get_transcripts_and_answers(stack, launch, tts, tmp_path):
    # Chrome's fake microphone starts the file each time the page opens the mic (on Record), so
    # every clip holds the lead silence, the question and a little tail.
    speech = speech_48k(tts, "What is the capital of Russia?")
    lead = int(0.5 * WAV_RATE)
    audio = np.zeros(lead + len(speech) + 20 * WAV_RATE, dtype=np.float32)
    audio[lead:lead + len(speech)] = speech
    wav = write_wav(tmp_path / "clip.wav", audio)
    clip_s = 0.5 + len(speech) / WAV_RATE + 0.8
    browser = open_chat(launch, stack, wav, voice=False)
    try:
        record = browser.find_element(By.ID, "record")
        # 1: push-to-talk (hold the button while speaking).
        ActionChains(browser).click_and_hold(record).pause(clip_s).release().perform()
        wait_for_answer(browser)
        # 2: click to start, click again to send.
        record.click()
        assert wait_until(lambda: snapshot(browser)["state"] == "recording", 10), snapshot(browser)
        time.sleep(clip_s)
        record.click()
        snap = wait_for_answer(browser, count=2)
        user = [m["text"].lower() for m in snap["messages"] if m["role"] == "user"]
        assert len(user) == 2, snap
        for heard in user:
            assert "capital" in heard and "russia" in heard, snap
        assert all(answers(snap)) and not snap["error"], snap
        assert re.search(r"voice clip, \d+\.\d s$", browser.find_elements(By.CSS_SELECTOR, ".bubble.user .meta")[0].text)
        print(f"heard {user}; answers {answers(snap)}")
    except BaseException:
        dump_console(browser)
        raise


def test_image_gets_an_answer(stack, launch, silence, tmp_path):
    import cv2

    # A large photo-sized picture: the page must downscale it before sending.
    img = np.zeros((1500, 2000, 3), dtype=np.uint8)
    img[:, :] = (40, 160, 60)  # BGR green
    cv2.circle(img, (1000, 750), 400, (40, 40, 220), -1)  # a red disc
    path = tmp_path / "picture.png"
    cv2.imwrite(str(path), img)

    browser = open_chat(launch, stack, silence, voice=False)
    try:
        browser.find_element(By.ID, "image-input").send_keys(str(path))
        assert wait_until(lambda: browser.find_element(By.ID, "attachment").is_displayed(), 10)
        assert "1024×768" in browser.find_element(By.ID, "attachment-name").text
        problems = screenshot_both(browser, tmp_path, "attachment")
        assert not problems, problems
        send_text(browser, "What colors are in this picture?")
        snap = wait_for_answer(browser)
        assert snap["messages"][0]["role"] == "user"
        thumb = browser.find_element(By.CSS_SELECTOR, ".bubble.user img.thumb")
        assert thumb.is_displayed()
        assert 0 < browser.execute_script("return arguments[0].naturalWidth", thumb) <= 240
        assert not browser.find_element(By.ID, "attachment").is_displayed()
        assert snap["playedMs"] == 0  # spoken replies were off
        problems = screenshot_both(browser, tmp_path, "image_chat")
        assert not problems, problems
        print(f"image answer: {answers(snap)[0]!r}")
    except BaseException:
        dump_console(browser)
        raise


def test_save_and_share_opens_read_only(stack, launch, silence, tmp_path):
    browser = open_chat(launch, stack, silence, voice=False)
    share_file = None
    try:
        send_text(browser, QUESTION)
        snap = wait_for_answer(browser)
        browser.find_element(By.ID, "save-share").click()
        url = wait_until(lambda: snapshot(browser)["shareUrl"], 15)
        assert re.fullmatch(rf"{re.escape(stack.url)}/turnbased\.html\?share=[A-Za-z0-9_-]{{22}}", url), url
        # The gateway's data dir: the stack's own where it has one, else the repo's.
        data_dir = Path(getattr(stack, "data_dir", ROOT / "data"))
        share_file = data_dir / "shares" / f"{url.rsplit('=', 1)[1]}.json"
        assert share_file.is_file()
        problems = screenshot_both(browser, tmp_path, "saved")
        assert not problems, problems

        viewer = launch(silence)  # a fresh browser: nothing shared but the link
        viewer.get(url)
        shared = wait_until(lambda: (s := snapshot(viewer)) and s["state"] == "shared" and s["messages"] and s, 15)
        assert shared and shared["messages"] == snap["messages"], shared
        assert not viewer.find_element(By.ID, "composer").is_displayed()  # read-only
        assert not viewer.find_element(By.ID, "save-share").is_displayed()
        start = viewer.find_element(By.ID, "share-new")
        assert start.is_displayed() and start.text == "Start a new chat"
        problems = screenshot_both(viewer, tmp_path, "shared")
        assert not problems, problems
        start.click()
        assert wait_until(lambda: viewer.current_url.endswith("/turnbased.html"), 10), viewer.current_url
        assert wait_until(lambda: viewer.find_element(By.ID, "composer").is_displayed(), 10)
    except BaseException:
        dump_console(browser)
        raise
    finally:
        if share_file is not None:
            share_file.unlink(missing_ok=True)  # leave no test share in a shared data dir


def test_unknown_share_link_explains(stack, launch, silence):
    browser = launch(silence)
    browser.get(f"{stack.url}/turnbased.html?share=AAAAAAAAAAAAAAAAAAAAAA")
    alert = wait_until(lambda: snapshot(browser)["alert"], 10)
    assert alert and "not found" in alert, alert
    assert browser.find_element(By.ID, "share-new").is_displayed()


@pytest.fixture(scope="module")
def busy_gateway(tmp_path_factory):
    """A gateway with no workers and room for one waiting client: the next one is turned away."""
    s = Stack(tmp_path_factory.mktemp("busy_gateway"), workers=0, queue={"capacity": 1}).start(timeout=60)
    yield s
    s.stop()


def test_queue_position_and_queue_full_are_readable(busy_gateway, launch, silence):
    first = open_chat(launch, busy_gateway, silence, voice=False)
    second = None
    try:
        send_text(first, QUESTION)
        status = first.find_element(By.ID, "status-text")
        assert wait_until(lambda: status.text.startswith("Queued: position 1 of 1"), 15), status.text
        second = open_chat(launch, busy_gateway, silence, voice=False)
        send_text(second, QUESTION)
        alert = wait_until(lambda: snapshot(second)["alert"], 15)
        assert alert and "busy" in alert and "queue is full" in alert, alert
        assert "{" not in alert and "queue_full" not in alert  # words, not raw JSON or codes
        failed = wait_until(lambda: second.find_elements(By.CSS_SELECTOR, ".bubble.user.status-failed"), 10)
        assert failed and "try again" in failed[0].text.lower(), failed and failed[0].text
        assert snapshot(first)["state"] == "queued"  # the one waiting is not disturbed
    except BaseException:
        for b in (first, second):
            if b is not None:
                dump_console(b)
        raise


def test_mic_denied_explains_what_to_do(stack, launch, silence):
    browser = launch(silence, allow_mic=False)
    browser.get(f"{stack.url}/turnbased.html")
    browser.find_element(By.ID, "record").click()
    alert = wait_until(lambda: snapshot(browser)["alert"], 20)
    try:
        assert alert and "microphone" in alert.lower() and "record again" in alert.lower(), alert
        assert browser.find_element(By.ID, "record").is_enabled()  # the user can retry
        assert browser.find_element(By.ID, "input").is_enabled()  # and can still type
        assert stack.health()["slots_busy"] == 0  # no queue slot taken for a failed recording
    except BaseException:
        dump_console(browser)
        raise


def test_stop_cancels_the_reply_and_silences_it(stack, launch, silence):
    browser = open_chat(launch, stack, silence)
    try:
        send_text(browser, "Please tell me a long story about a brave little dragon.")
        assert wait_until(lambda: snapshot(browser)["playedMs"] > 300, 60), snapshot(browser)
        assert snapshot(browser)["state"] == "responding"  # still generating: Stop must cancel it
        browser.find_element(By.ID, "stop").click()
        stopped = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".bubble.assistant.status-cancelled"), 15)
        assert stopped and "Stopped" in stopped[0].text, snapshot(browser)
        assert wait_until(lambda: snapshot(browser)["state"] == "ready", 10), snapshot(browser)
        played = snapshot(browser)["playedMs"]
        time.sleep(1.0)
        assert snapshot(browser)["playedMs"] - played < 100  # the player was flushed
        assert not browser.find_element(By.ID, "stop").is_displayed()
        assert not snapshot(browser)["alert"]  # a Stop racing the end is not an error
        # The conversation goes on after a stop.
        send_text(browser, QUESTION)
        wait_for_answer(browser, count=2)
    except BaseException:
        dump_console(browser)
        raise


def test_worker_failure_is_readable_and_next_message_starts_a_new_session(stack, launch, silence):
    """Last in the module: it kills the worker (and starts it again for the follow-up)."""
    browser = open_chat(launch, stack, silence, voice=False)
    try:
        send_text(browser, "My name is Alice.")
        wait_for_answer(browser)
        stack.kill("worker0")
        alert = wait_until(lambda: snapshot(browser)["alert"], 20)
        assert alert and "worker" in alert.lower() and "{" not in alert, alert
        stack.start_worker(0)
        stack.wait_healthy(1)
        send_text(browser, "What is my name?")
        snap = wait_for_answer(browser, count=2)
        assert browser.execute_script("return window.omni.sessions") == 2
        assert [m["role"] for m in snap["messages"]] == ["user", "assistant", "user", "assistant"]
        assert not snap["error"], snap["error"]  # the re-sent history was accepted
        print(f"after reconnect: {answers(snap)[1]!r}")
    except BaseException:
        dump_console(browser)
        raise


def test_a_dropped_network_comes_back_to_the_same_session(stack, launch, silence):
    """Issue 72: the network goes (DevTools offline) and comes back; the page reconnects with its
    resume token, says so, and the same session answers the next message with what came before."""
    browser = open_chat(launch, stack, silence, voice=False)
    online = {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
    try:
        send_text(browser, "My name is Alice.")
        wait_for_answer(browser)
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", {**online, "offline": True})
        assert wait_until(lambda: snapshot(browser)["state"] == "reconnecting", 20), snapshot(browser)
        time.sleep(1.0)  # away a moment: the page keeps trying meanwhile
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", online)
        assert wait_until(lambda: browser.execute_script("return window.omni.reconnects") == 1, 20), snapshot(browser)
        send_text(browser, "What is my name?")
        snap = wait_for_answer(browser, count=2)
        assert browser.execute_script("return window.omni.sessions") == 1  # the same session, not a new one
        assert [m["role"] for m in snap["messages"]] == ["user", "assistant", "user", "assistant"]
        assert not snap["alert"] and not snap["error"], (snap["alert"], snap["error"])
    except BaseException:
        dump_console(browser)
        raise
