"""The chat page's demo tools in headless Chromium, against real worker and gateway processes.

With "Demo tools" on and tool use "Always call a tool first", a typed "What time is it?" makes
the cascade call ``get_time``; the page runs it in the browser, sends the
``function_call_output`` and a ``response.create``, and the transcript shows the call, its
result and then the answer. The in-browser calculator and its errors are checked directly.
"""

from __future__ import annotations

import json
import re


from tests.support.browser import (
    BUSY,
    dump_console,
    layout_problems,
    open_chat,
    require_browser,
    send_text,
    silence_wav,
    snapshot,
    wait_until,
)

require_browser()

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select



def test_demo_tool_call_is_run_by_the_page_and_answered(stack, launch, tmp_path):
    browser = open_chat(launch, stack, silence_wav(tmp_path / "silence.wav"), voice=False)
    try:
        box = browser.find_element(By.ID, "demo-tools")
        assert not box.is_selected()  # off by default
        box.click()
        Select(browser.find_element(By.ID, "tool-choice")).select_by_value("required")
        send_text(browser, "What time is it?")

        def answered():
            snap = snapshot(browser)
            msgs = (snap or {}).get("messages", [])
            roles = [m["role"] for m in msgs]
            ok = (snap and snap["state"] not in BUSY and "tool" in roles and roles[-1] == "assistant"
                  and msgs[-1]["text"].strip())
            return snap if ok else None

        snap = wait_until(answered, 180)
        assert snap, f"no answer after the call: {json.dumps(snapshot(browser), indent=1)}"
        msgs = snap["messages"]
        assert [m["role"] for m in msgs] == ["user", "tool", "tool", "assistant"], msgs
        call, result = msgs[1], msgs[2]
        assert call["kind"] == "call" and call["name"] == "get_time" and call["text"].startswith("get_time("), call
        assert result["kind"] == "result" and result["name"] == "get_time", result
        # The model fills the optional timezone as it likes; an odd one is answered {"error": ...}.
        out = result["output"]
        assert out.get("time") or out.get("error"), result
        assert not snap["alert"] and not snap["error"], snap
        # Distinct cards in the transcript, in order, in words (no raw JSON on screen).
        cards = browser.find_elements(By.CSS_SELECTOR, "#messages .bubble")
        classes = [c.get_attribute("class") for c in cards]
        assert "tool call" in classes[1] and "tool result" in classes[2] and "assistant" in classes[3], classes
        assert "get_time(" in cards[1].text and "function call" in cards[1].text
        assert (out.get("time") or out["error"]) in cards[2].text and "get_time result" in cards[2].text
        # The small model may echo JSON in its own answer; the page's cards must not show any.
        problems = [p for p in layout_problems(browser) if p != "raw JSON visible"]
        assert not problems, problems
        for card in cards[1:3]:
            assert not re.search(r'[{\[]\s*"[a-z_]+"\s*:', card.text), card.text
        browser.save_screenshot(str(tmp_path / "tools.png"))
        print(f"call {call['text']!r} -> {result['text']!r}; answer {msgs[3]['text']!r}")

        # The toggle and the tool use choice are kept per browser.
        browser.refresh()
        assert wait_until(lambda: browser.find_elements(By.ID, "demo-tools"), 10)
        assert browser.find_element(By.ID, "demo-tools").is_selected()
        assert Select(browser.find_element(By.ID, "tool-choice")).first_selected_option.get_attribute("value") == "required"
    except BaseException:
        dump_console(browser)
        raise


CHECKS_JS = """
const done = arguments[arguments.length - 1];
import('/static/chat/demo-tools.js').then((m) => done({
  sum: m.runDemoTool('calculate', JSON.stringify({expression: '(12.5 + 7.5) * 3 / -2'})),
  decimals: m.runDemoTool('calculate', '{"expression": "0.1 + 0.2"}'),
  bad: m.runDemoTool('calculate', '{"expression": "2 + alert(1)"}'),
  zero: m.runDemoTool('calculate', '{"expression": "1 / (2 - 2)"}'),
  unknown: m.runDemoTool('delete_everything', '{}'),
  zone: m.runDemoTool('get_time', '{"timezone": "Asia/Tokyo"}'),
  offset: m.runDemoTool('get_time', '{"timezone": "UTC+1"}'),
  badZone: m.runDemoTool('get_time', '{"timezone": "Mars/Olympus"}'),
  badJson: m.runDemoTool('get_time', '{nope'),
}), (e) => done({failed: String(e)}));
"""


def test_demo_tools_evaluate_safely_and_report_errors(stack, launch, tmp_path):
    browser = launch(silence_wav(tmp_path / "silence.wav"))
    browser.get(f"{stack.url}/turnbased.html")
    r = browser.execute_async_script(CHECKS_JS)
    assert "failed" not in r, r
    assert r["sum"] == {"expression": "(12.5 + 7.5) * 3 / -2", "result": -30}
    assert r["decimals"]["result"] == 0.3
    assert r["bad"]["error"].startswith("bad expression") and set(r["bad"]) == {"error"}
    assert "division by zero" in r["zero"]["error"]
    assert r["unknown"] == {"error": "unknown function: delete_everything"}
    assert r["zone"]["timezone"] == "Asia/Tokyo" and r["zone"]["time"]
    assert r["offset"]["time"], r["offset"]
    assert "unknown time zone" in r["badZone"]["error"]
    assert "error" in r["badJson"]
