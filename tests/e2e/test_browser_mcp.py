"""The chat page's MCP server setting in headless Chromium, against real gateway and worker
processes (the embedded cascade) and a real MCP server (``tests/support/mcp_server.py``).

- "Never ask": a typed "What is the weather in Paris?" with tool use "Always call a tool first"
  makes the cascade call the server's ``get_weather``; the worker runs it and speaks the result in
  a reply of its own, and the transcript shows the listing, the call, its result and the answer.
- "Ask me": the reply ends with an approval request; Approve sends the ``mcp_approval_response``
  and ``response.create``, the server runs the call and the answer follows.
- A server on a host the operator does not allow is refused, and the page says so; one that
  cannot be reached fails its listing, which the page shows, and the chat goes on without it.
- The viewer draws the recorded tool events (listing, approval, calls) on its timeline.

``allowed_tools: ["get_weather"]`` keeps the small model's forced choice deterministic.
"""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from tests.support.browser import (
    BUSY,
    dump_console,
    layout_problems,
    PHONE,
    open_chat,
    require_browser,
    screenshot_both,
    send_text,
    silence_wav,
    snapshot,
    wait_until,
)
from tests.support.mcp_server import mcp_server, unused_url  # noqa: F401 - mcp_server: a fixture
from tests.support.stack import Stack

require_browser()

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

QUESTION = "What is the weather in Paris?"
RESULT = "The weather in Paris is sunny, 21 degrees."
MAX_TOKENS = 40  # room for one tool call's JSON; the cascade's LLM is slow on 2 cores


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """This module's own stack: MCP servers on 127.0.0.1 allowed (``tools.mcp.allowed_hosts``)."""
    s = Stack(tmp_path_factory.mktemp("browser_mcp"), workers=1, tools={"mcp": {"allowed_hosts": ["127.0.0.1"]}}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def recorded() -> dict:
    """Share URLs of the recorded sessions, by test: the viewer test reads one."""
    return {}


def chat_with_mcp(launch, stack, tmp_path, url: str, approval: str, allowed: str = "get_weather"):
    """The chat page with the MCP server's fields filled as a user would, tool use forced."""
    browser = open_chat(launch, stack, silence_wav(tmp_path / "silence.wav"), voice=False)
    tokens = browser.find_element(By.ID, "max-tokens")
    tokens.send_keys(Keys.CONTROL, "a")  # clear() would blur it empty, and the page shows the clamped 1
    tokens.send_keys(str(MAX_TOKENS))
    box = browser.find_element(By.ID, "mcp-settings")
    assert box.get_attribute("open") is None, "the MCP fields are folded while no server is set"
    box.find_element(By.TAG_NAME, "summary").click()
    browser.find_element(By.ID, "mcp-url").send_keys(url)
    Select(browser.find_element(By.ID, "mcp-approval")).select_by_value(approval)
    browser.find_element(By.ID, "mcp-allowed").send_keys(allowed)
    choice = browser.find_element(By.ID, "tool-choice")
    choice.click()  # the fields' change events fire as they lose focus
    assert choice.is_enabled(), "tool use stays off with an MCP server set"
    Select(choice).select_by_value("required")
    return browser


def tools_of(snap: dict) -> list[dict]:
    return [m for m in snap["messages"] if m["role"] == "tool"]


def answered(browser):
    """The page is idle and its last message is a non-empty answer after a tool result."""
    def check():
        snap = snapshot(browser)
        msgs = (snap or {}).get("messages", [])
        ok = (snap and snap["state"] not in BUSY and any(m.get("kind") == "result" for m in msgs)
              and msgs[-1]["role"] == "assistant" and msgs[-1]["text"].strip())
        return snap if ok else None
    return check


def cards(browser) -> list[tuple[str, str]]:
    return [(c.get_attribute("class"), c.text) for c in browser.find_elements(By.CSS_SELECTOR, "#messages .bubble")]


def finish_session(browser, stack) -> str:
    """New chat ends the session; returns its share URL once the recording is finished."""
    share_url = browser.execute_script("return window.omni.recording && window.omni.recording.share_url")
    assert share_url, "the session is not recorded"
    browser.execute_script("window.scrollTo(0, 0)")  # the toolbar is under the sticky nav further down
    browser.find_element(By.ID, "new-chat").click()
    sid, query = share_url.split("/s/", 1)[1].split("?", 1)

    def finished():
        r = httpx.get(f"{stack.url}/api/sessions/{sid}?{query}", timeout=5)
        return r.status_code == 200 and r.json()["meta"].get("status") == "finished"
    assert wait_until(finished, 30, 0.5), share_url
    return share_url


def test_never_ask_the_server_runs_the_call_and_the_answer_follows(stack, launch, mcp_server, recorded, tmp_path):
    before = mcp_server.calls["get_weather"]
    browser = chat_with_mcp(launch, stack, tmp_path, mcp_server.url, "never")
    started = time.monotonic()
    try:
        send_text(browser, QUESTION)
        snap = wait_until(answered(browser), 150)
        assert snap, f"no answer after the MCP call: {json.dumps(snapshot(browser), indent=1)}"
        msgs = snap["messages"]
        assert [(m["role"], m.get("kind")) for m in msgs[:4]] == [
            ("user", None), ("tool", "list"), ("tool", "call"), ("tool", "result")], msgs
        listing, call, result = msgs[1:4]
        assert listing["server"] == "mcp" and listing["tools"] == ["get_weather"] and not listing["error"], listing
        assert listing["text"] == "Tools: get_weather", listing
        assert call["name"] == "get_weather" and call["server"] == "mcp" and call["text"].startswith("get_weather(")
        assert "paris" in call["arguments"].lower(), call
        assert result["output"] == RESULT and result["text"] == RESULT, result
        assert msgs[-1]["role"] == "assistant" and msgs[-1]["text"].strip(), msgs
        assert mcp_server.calls["get_weather"] >= before + 1
        assert not snap["alert"] and not snap["error"], snap
        shown = cards(browser)
        assert "tool list mcp" in shown[1][0] and "Tools: get_weather" in shown[1][1], shown
        assert "tool call mcp" in shown[2][0] and "get_weather(" in shown[2][1] and "MCP call on mcp" in shown[2][1]
        assert "tool result mcp" in shown[3][0] and RESULT in shown[3][1] and "get_weather result from mcp" in shown[3][1]
        assert "assistant" in shown[-1][0], shown
        for cls, text in shown[1:4]:
            assert not re.search(r'[{\[]\s*"[a-z_]+"\s*:', text), text  # words, never raw JSON
        browser.save_screenshot(str(tmp_path / "mcp_never_ask.png"))
        # Desktop and phone widths; on a phone the settings (with the MCP fields) open above the chat.
        browser.set_window_size(*PHONE)
        browser.find_element(By.ID, "settings-toggle").click()
        problems = [p for p in screenshot_both(browser, tmp_path, "mcp_chat") if not p.endswith("raw JSON visible")]
        assert not problems, problems  # the model's answer may echo JSON; the cards never do (above)
        print(f"{time.monotonic() - started:.1f} s: {call['text']!r} -> {result['text']!r}; answer {msgs[-1]['text']!r}")
        recorded["never"] = finish_session(browser, stack)
    except BaseException:
        dump_console(browser)
        raise


def run_with_approval(browser, mcp_server, shot=None) -> dict:
    """Ask, get the approval prompt, Approve; returns the answered snapshot. ``shot``: a path
    for a screenshot of the prompt."""
    before = mcp_server.calls["get_weather"]
    send_text(browser, QUESTION)
    buttons = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, ".bubble.approval .approval-actions button"), 150)
    assert buttons, f"no approval prompt: {json.dumps(snapshot(browser), indent=1)}"
    snap = snapshot(browser)
    request = next(m for m in tools_of(snap) if m["kind"] == "approval")
    assert request["name"] == "get_weather" and request["status"] == "pending" and "paris" in request["arguments"].lower()
    assert [b.text for b in buttons] == ["Approve", "Decline"]
    assert "mcp wants to run this" in browser.find_element(By.CSS_SELECTOR, ".bubble.approval").text
    assert snap["state"] not in BUSY and mcp_server.calls["get_weather"] == before  # nothing ran yet
    if shot is not None:
        browser.save_screenshot(str(shot))
    buttons[0].click()
    snap = wait_until(answered(browser), 150)
    assert snap, f"no answer after the approval: {json.dumps(snapshot(browser), indent=1)}"
    assert mcp_server.calls["get_weather"] >= before + 1
    return snap


def test_ask_me_shows_an_approval_prompt_and_approve_runs_the_call(stack, launch, mcp_server, recorded, tmp_path):
    browser = chat_with_mcp(launch, stack, tmp_path, mcp_server.url, "always")
    try:
        snap = run_with_approval(browser, mcp_server, tmp_path / "mcp_approval_prompt.png")
        kinds = [(m["role"], m.get("kind")) for m in snap["messages"]]
        assert kinds[:5] == [("user", None), ("tool", "list"), ("tool", "approval"), ("tool", "call"), ("tool", "result")], kinds
        request, call, result = snap["messages"][2:5]
        assert request["status"] == "approved", request
        assert call["name"] == "get_weather" and result["output"] == RESULT, (call, result)
        assert not browser.find_elements(By.CSS_SELECTOR, ".approval-actions")  # answered: the buttons are gone
        assert "approved" in browser.find_element(By.CSS_SELECTOR, ".bubble.approval").text
        assert not snap["alert"] and not snap["error"], snap
        problems = [p for p in layout_problems(browser) if p != "raw JSON visible"]
        assert not problems, problems
        browser.save_screenshot(str(tmp_path / "mcp_approved.png"))
        print(f"approved: {[m['text'] for m in snap['messages']]}")
        recorded["approval"] = finish_session(browser, stack)
    except BaseException:
        dump_console(browser)
        raise


def test_a_host_the_operator_does_not_allow_is_refused_on_the_page(stack, launch, tmp_path):
    browser = chat_with_mcp(launch, stack, tmp_path, "http://example.invalid/mcp", "never")
    try:
        send_text(browser, "Hello.")
        snap = wait_until(lambda: (s := snapshot(browser)) and s["alert"] and s, 60)
        assert snap, f"no refusal shown: {json.dumps(snapshot(browser), indent=1)}"
        assert snap["alert"].startswith("The MCP server was refused:") and "example.invalid" in snap["alert"], snap
        assert "not allowed" in snap["alert"], snap
        assert snap["error"]["code"] == "mcp_server_not_allowed", snap
        alert = browser.find_element(By.ID, "alert")
        assert alert.is_displayed() and "example.invalid" in alert.text
        refused = wait_until(lambda: [m for m in tools_of(snapshot(browser)) if m["kind"] == "list"], 10)
        assert refused and refused[0]["error"] and "not allowed" in refused[0]["text"], refused
        assert "Refused" in browser.find_element(By.CSS_SELECTOR, ".bubble.tool.list").text
        status = browser.find_element(By.ID, "mcp-status")
        assert status.is_displayed() and "Refused by the server" in status.text, status.text
        # The chat goes on without the server: the message is still answered.
        done = wait_until(lambda: (s := snapshot(browser)) and s["state"] not in BUSY
                          and s["messages"] and s["messages"][-1]["role"] == "assistant" and s, 120)
        assert done and done["messages"][0]["role"] == "user" and done["messages"][0].get("text") == "Hello.", done
        browser.save_screenshot(str(tmp_path / "mcp_refused.png"))
        print(f"refused: {json.dumps(done)}")
    except BaseException:
        dump_console(browser)
        raise


def test_a_server_that_cannot_be_listed_says_why_and_the_chat_goes_on(stack, launch, tmp_path):
    browser = chat_with_mcp(launch, stack, tmp_path, unused_url(), "never")
    try:
        send_text(browser, "Hello.")
        done = wait_until(lambda: (s := snapshot(browser)) and s["state"] not in BUSY
                          and s["messages"] and s["messages"][-1]["role"] == "assistant" and s, 120)
        assert done, f"no answer: {json.dumps(snapshot(browser), indent=1)}"
        listing = [m for m in tools_of(done) if m["kind"] == "list"]
        assert len(listing) == 1 and listing[0]["status"] == "failed" and listing[0]["error"], done
        assert listing[0]["text"].startswith("Listing failed: "), listing
        assert done["alert"].startswith("The MCP server's tools could not be listed: "), done
        card = browser.find_element(By.CSS_SELECTOR, ".bubble.tool.list")
        assert "tool-error" in card.get_attribute("class") and "Listing failed" in card.text
        print(f"listing failed: {listing[0]['text']!r}; answer {done['messages'][-1]['text']!r}")
    except BaseException:
        dump_console(browser)
        raise


def viewer_tools(browser) -> dict:
    return browser.execute_script(
        "const q = (s) => [...document.querySelectorAll(s)];"
        " return {calls: q('.turn-marker.tool-call').map((m) => m.title),"
        " failed: q('.turn-marker.tool-failed').map((m) => m.title),"
        " lists: q('.turn-marker.tool-list').map((m) => m.title),"
        " approvals: q('.turn-marker.tool-approval').map((m) => m.title),"
        " chips: q('.lane[data-lane=\"Tools\"] .chip').map((c) => [c.className, c.textContent, c.title]),"
        " legend: document.querySelector('.legend').textContent};")


def test_the_viewer_draws_the_recorded_tool_events(stack, launch, mcp_server, recorded, tmp_path):
    browser = None
    try:
        share_url = recorded.get("approval")
        if share_url is None:  # run alone: record a session with an approval and a call first
            browser = chat_with_mcp(launch, stack, tmp_path, mcp_server.url, "always")
            run_with_approval(browser, mcp_server)
            share_url = finish_session(browser, stack)
        browser = browser or launch(silence_wav(tmp_path / "quiet.wav", 1.0))
        browser.get(f"{stack.url}{share_url}")
        viewer = wait_until(lambda: browser.execute_script("return window.viewer && window.viewer.ready && window.viewer"), 30)
        assert viewer and not viewer["error"], viewer
        assert "Tools" in viewer["lanes"], viewer
        assert viewer["tools"]["calls"] >= 1 and viewer["tools"]["lists"] == 1 and viewer["tools"]["approvals"] == 1, viewer
        dom = viewer_tools(browser)
        call = next(t for t in dom["calls"] if t.startswith("MCP call"))
        assert "get_weather" in call and "Paris" in call and RESULT in call, dom
        assert any("Approval asked" in t and "get_weather" in t for t in dom["calls"]), dom
        assert dom["lists"] and "get_weather" in dom["lists"][0], dom
        assert dom["approvals"] and "Approved" in dom["approvals"][0], dom
        chips = [(cls.split()[-1], text) for cls, text, _ in dom["chips"]]
        assert ("tool-list", "tools: get_weather") in chips and ("tool-approval", "approved") in chips, chips
        assert ("tool-call", "get_weather") in chips, chips
        for word in ("Tool call", "Failed tool call", "Tools listed", "Approval"):
            assert word in dom["legend"], dom["legend"]
        browser.execute_script("document.querySelector('.legend').scrollIntoView({block: 'end'})")
        shot = tmp_path / "viewer_tool_marks.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        problems = layout_problems(browser)
        assert not problems, problems
        print(f"viewer: {json.dumps(dom)}; screenshot {shot}")
    except BaseException:
        if browser is not None:
            dump_console(browser)
        raise
