"""The admin page in headless Chromium against real worker and gateway processes: sign-in, the
real worker in the grid, its session, the queue, the Drain and Enable buttons, and a disabled
app's page and home card."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.support.realtime_client import recv_until_sync
from tests.support.browser import dump_console, require_browser, screenshot_both, silence_wav, wait_until

require_browser()

from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from websockets.sync.client import connect  # noqa: E402



def overview(browser) -> dict | None:
    return browser.execute_script("return window.admin && window.admin.overview")


def worker_card(browser, worker_id: str) -> dict | None:
    return browser.execute_script(
        "const c = document.querySelector(`.worker[data-worker='${arguments[0]}']`);"
        "return c ? {health: c.dataset.health, badge: c.querySelector('.badge').textContent,"
        " text: c.innerText, buttons: [...c.querySelectorAll('button')].map((b) => b.dataset.action)} : null;",
        worker_id)


def click(browser, css: str, timeout: float = 10.0) -> None:
    """A real click; the grid re-renders every second, so retry on a stale element."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            browser.find_element(By.CSS_SELECTOR, css).click()
            return
        except StaleElementReferenceException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_sign_in_form(stack, launch, tmp_path):
    browser = launch(silence_wav(tmp_path / "s.wav", 2))
    browser.get(f"{stack.url}/admin")
    assert "needs the operator's token" in browser.find_element(By.TAG_NAME, "main").text
    browser.find_element(By.NAME, "token").send_keys(stack.admin_token)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    assert wait_until(lambda: (overview(browser) or {}).get("workers"), timeout=15)
    assert browser.current_url.endswith("/admin")


def test_admin_page_shows_the_real_worker_and_drain_works(stack, launch, tmp_path, screenshot_dir):
    browser = launch(silence_wav(tmp_path / "s.wav", 2))
    url = f"ws://127.0.0.1:{stack.port}/v1/realtime?extensions=all"
    a = b = None
    try:
        browser.get(f"{stack.url}/admin?token={stack.admin_token}")
        assert browser.current_url.endswith("/admin")  # the token left the address bar
        card = wait_until(lambda: (c := worker_card(browser, "w0")) and c["health"] == "healthy" and c, timeout=20)
        assert card, overview(browser)
        assert stack.worker_url() in card["text"]  # the real worker, at its real URL
        assert "IDLE" in card["text"] and "audio_output" in card["text"]
        assert card["buttons"] == ["disable", "dead", "remove"]

        a = connect(url)
        recv_until_sync(a, "session.created")
        card = wait_until(lambda: (c := worker_card(browser, "w0")) and "1 / 1 busy" in c["text"] and c, timeout=10)
        assert card and "api" in card["text"], card
        assert wait_until(lambda: len((overview(browser) or {}).get("live", [])) == 1, timeout=5)

        click(browser, "button[data-action='disable'][data-worker='w0']")
        assert wait_until(lambda: worker_card(browser, "w0")["badge"] == "disabled", timeout=10)
        health = httpx.get(f"{stack.url}/api/admin/workers", headers={"Authorization": f"Bearer {stack.admin_token}"})
        assert health.json()["workers"][0]["health"] == "disabled"

        b = connect(url)
        assert recv_until_sync(b, "queue.position")["position"] == 1
        a.close()
        a = None
        # The drained worker is free but takes nobody: the page shows one waiting, none busy.
        assert wait_until(lambda: (o := overview(browser)) and o["totals"]["busy"] == 0
                          and o["totals"]["queue_length"] == 1, timeout=10)
        assert browser.find_element(By.ID, "queue").find_elements(By.CSS_SELECTOR, "tbody tr")
        time.sleep(1.0)
        assert (overview(browser) or {})["totals"]["queue_length"] == 1
        problems = screenshot_both(browser, screenshot_dir, "admin_draining")

        click(browser, "button[data-action='enable'][data-worker='w0']")
        assert recv_until_sync(b, "queue.assigned")["worker_id"] == "w0"
        recv_until_sync(b, "session.created")
        assert wait_until(lambda: worker_card(browser, "w0")["badge"] == "healthy", timeout=10)
        assert not problems, problems
        print(f"admin screenshots in {screenshot_dir}")
    except BaseException:
        dump_console(browser)
        raise
    finally:
        for ws in (a, b):
            if ws is not None:
                ws.close()


def test_disabled_app_page_says_so(stack, launch, tmp_path):
    admin = {"Authorization": f"Bearer {stack.admin_token}"}
    assert httpx.put(f"{stack.url}/api/admin/apps/audio_duplex", json={"enabled": False}, headers=admin).is_success
    browser = launch(silence_wav(tmp_path / "s.wav", 2))
    try:
        browser.get(f"{stack.url}/audio_duplex.html")
        alert = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-gate='audio_duplex']"), timeout=10)
        assert alert and "disabled by the operator" in alert[0].text
        assert not browser.find_element(By.ID, "start").is_enabled()
        browser.get(f"{stack.url}/")
        card = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "a.card[data-disabled='true']"), timeout=10)
        assert card and "Disabled by the operator" in card[0].text and card[0].get_attribute("href").endswith(
            "/audio_duplex.html")
        # An enabled app's page is untouched.
        browser.get(f"{stack.url}/omni.html")
        time.sleep(1.0)
        assert not browser.find_elements(By.CSS_SELECTOR, "[data-gate]")
    finally:
        httpx.put(f"{stack.url}/api/admin/apps/audio_duplex", json={"enabled": True}, headers=admin)


KEY = "sk-browser-test-key-42"


@pytest.fixture(scope="module")
def keyed_stack(tmp_path_factory):
    from tests.support.stack import Stack

    s = Stack(tmp_path_factory.mktemp("keyed_stack"), workers=1, auth={"api_keys": [KEY]}).start()
    yield s
    s.stop()


def test_chat_page_with_api_keys_asks_once_and_sends_the_key_as_subprotocol(keyed_stack, launch, tmp_path):
    from selenium.webdriver.common.keys import Keys

    stack = keyed_stack
    browser = launch(silence_wav(tmp_path / "s.wav", 2))
    try:
        browser.get(f"{stack.url}/turnbased.html")
        gate = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-gate='chat'] input[type=password]"), 10)
        assert gate, "the page did not ask for the API key"
        gate[0].send_keys(KEY)
        gate[0].send_keys(Keys.ENTER)  # saved in this browser; the page reloads
        assert wait_until(lambda: browser.execute_script("return document.querySelectorAll('#preset option').length"),
                          15)
        assert not browser.find_elements(By.CSS_SELECTOR, "[data-gate]")
        box = browser.find_element(By.ID, "input")
        box.send_keys("What is the capital of France?")
        box.send_keys(Keys.ENTER)
        answer = wait_until(lambda: [m for m in (browser.execute_script("return window.omni && window.omni.messages")
                                                 or []) if m["role"] == "assistant" and m["text"].strip()], 120)
        assert answer, browser.execute_script("return window.omni && window.omni.error")
        # The session was tagged with the page's app (so the Chat toggle applies to it).
        metas = list((stack.sessions_dir).glob("*/meta.json"))
        assert metas and json.loads(metas[0].read_text())["app"] == "chat"
    except BaseException:
        dump_console(browser)
        raise


HANGUP_STATUS_JS = """
const e = performance.getEntriesByType('resource').filter((r) => r.name.endsWith('/hangup'));
return e.length ? e[e.length - 1].responseStatus : null;
"""


def test_duplex_page_call_with_api_keys_sends_the_stored_key(keyed_stack, launch, tmp_path):
    """On a service with API keys the duplex page's WebRTC call carries the key this browser stored
    (``Authorization: Bearer``, as Save & share sends it; the page never mints or holds another):
    without one, or with a wrong one, the call is refused with a sentence, the key box shows and
    nothing is left at the gateway; with the right one the call is admitted, and Stop's hangup (with
    the key) frees the slot."""
    from selenium.webdriver.common.keys import Keys

    stack = keyed_stack
    browser = launch(silence_wav(tmp_path / "s.wav", 2))
    try:
        browser.get(f"{stack.url}/audio_duplex.html")
        gate = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-gate='audio_duplex'] input[type=password]"),
                          10)
        assert gate, "the page did not ask for the API key"


        def refused() -> None:
            browser.find_element(By.ID, "start").click()
            alert = browser.find_element(By.ID, "alert")
            assert wait_until(lambda: alert.is_displayed() and alert.text, timeout=20), "no alert for the refused call"
            assert "API key" in alert.text and "{" not in alert.text, alert.text
            assert browser.execute_script("return window.omni.state") == "closed"
            assert browser.find_element(By.ID, "start").is_enabled()
            assert stack.health()["slots_busy"] == 0 and stack.health()["queue_length"] == 0

        def enter_key(key: str) -> None:
            box = browser.find_element(By.CSS_SELECTOR, "[data-gate='audio_duplex'] input[type=password]")
            box.send_keys(key)
            box.send_keys(Keys.ENTER)  # saved in this browser; the page reloads
            assert wait_until(lambda: browser.execute_script("return document.readyState") == "complete"
                              and browser.execute_script("return !!window.omni")
                              and not browser.find_elements(By.CSS_SELECTOR, "[data-gate]"), 10)

        refused()  # no key
        enter_key("sk-wrong")
        refused()
        assert browser.find_elements(By.CSS_SELECTOR, "[data-gate='audio_duplex'] input[type=password]"), \
            "the key box did not come back for a wrong key"
        enter_key(KEY)
        browser.find_element(By.ID, "start").click()
        assert wait_until(lambda: browser.execute_script("return window.omni.state") == "listening", timeout=30), \
            browser.execute_script("return {state: window.omni.state, error: window.omni.error}")
        call_id = browser.execute_script("return window.omni.callId")
        live = httpx.get(f"{stack.url}/api/admin/live", headers=stack.admin_headers, timeout=5).json()["sessions"]
        assert [s["transport"] for s in live if s.get("call_id") == call_id] == ["webrtc"], live
        browser.find_element(By.ID, "stop").click()
        assert wait_until(lambda: browser.execute_script(HANGUP_STATUS_JS), timeout=5) == 200
        assert wait_until(lambda: stack.health()["slots_busy"] == 0, timeout=5)
        assert not browser.find_element(By.ID, "alert").is_displayed()
    except BaseException:
        dump_console(browser)
        raise
    finally:
        browser.execute_script("window.omni && window.omni.session && window.omni.session.stop()")
