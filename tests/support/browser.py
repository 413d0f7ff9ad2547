"""Shared pieces of the browser tests: headless Chromium with a fake mic/camera, spoken WAVs.

Its fixtures (``stack``, ``tts``, ``launch``) reach every test module through ``pytest_plugins``
in ``conftest.py``; a browser test module starts with ``require_browser()`` so it is skipped, with
the reason, where Chromium or Selenium is missing.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Callable

import pytest

from devtools.browser_call import (  # noqa: F401 - re-exported for the browser tests
    CHROMEDRIVER, CHROMIUM, DESKTOP, WAV_RATE, chromium, silence_wav, speech_48k, spoken_wav, write_wav)
from tests.support.stack import ROOT

PHONE = (390, 844)
# Run before a page's scripts: getUserMedia without the echo canceller. A fake user speaks straight
# into the microphone (a headless browser has no echo path), and early in a call Chromium's
# canceller may hold back speech over loud playback; a page asks for it, as a real microphone needs.
NO_ECHO_CANCELLER = """(() => {
  const devices = navigator.mediaDevices, open = devices.getUserMedia.bind(devices);
  devices.getUserMedia = (c) => open(c && c.audio
    ? {...c, audio: {...(typeof c.audio === "object" ? c.audio : {}), echoCancellation: false}} : c);
})();"""

BUSY = {"connecting", "queued", "assigned", "transcribing", "thinking", "responding", "recording"}  # chat page states: busy


def require_browser() -> None:
    """Skip the calling test module unless Chromium, chromedriver and Selenium are all present."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if importlib.util.find_spec("selenium") is None:
        missing.append("python package selenium")
    if missing:
        pytest.skip(
            f"browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver; pip install selenium)",
            allow_module_level=True,
        )


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    """Where page screenshots go for a human to look at: ``artifacts/screenshots/`` (git-ignored)."""
    path = ROOT / "artifacts" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def tts():
    from core.cascade.tts import PiperTts

    return PiperTts()


@pytest.fixture
def launch(tmp_path):
    """``launch(wav, allow_media=True, size=DESKTOP)`` starts a Chromium; all are quit after the test."""
    drivers = []

    def start(wav: Path, allow_mic: bool = True, size: tuple[int, int] = DESKTOP):
        driver = chromium(wav, tmp_path / f"profile{len(drivers)}", allow_mic, size)
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.quit()


def dump_console(driver) -> None:
    for entry in driver.get_log("browser"):
        print("browser:", entry.get("level"), entry.get("message"))


def wait_until(fn: Callable[[], object], timeout: float = 30.0, interval: float = 0.25):
    """Call ``fn`` until it returns something truthy or time runs out; returns the last value."""
    deadline = time.monotonic() + timeout
    value = fn()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = fn()
    return value


# Layout check used by the screenshot tests: a page "looks finished" only if nothing spills
# sideways and no visible text block overlaps another.
LAYOUT_PROBLEMS_JS = r"""
const problems = [];
const doc = document.documentElement;
if (doc.scrollWidth > window.innerWidth + 1) problems.push(`horizontal scroll: ${doc.scrollWidth} > ${window.innerWidth}`);
const sel = 'h1, h2, p, button, label, select, input, textarea, .metric, .status, .card, .bubble, video, canvas, .meter';
// The part of an element actually visible: clipped by every scrolling/overflow-hidden ancestor.
function visibleRect(e) {
  const r = e.getBoundingClientRect();
  let box = {left: r.left, top: r.top, right: r.right, bottom: r.bottom};
  for (let p = e.parentElement; p; p = p.parentElement) {
    const s = getComputedStyle(p);
    if (s.overflowX !== 'visible' || s.overflowY !== 'visible') {
      const c = p.getBoundingClientRect();
      box = {left: Math.max(box.left, c.left), top: Math.max(box.top, c.top),
             right: Math.min(box.right, c.right), bottom: Math.min(box.bottom, c.bottom)};
    }
  }
  return box;
}
const els = [...document.querySelectorAll(sel)].filter((e) => {
  const s = getComputedStyle(e), v = visibleRect(e);
  return v.right - v.left > 0 && v.bottom - v.top > 0 && s.visibility !== 'hidden' && s.display !== 'none'
    && !e.closest('[hidden]');
});
for (let i = 0; i < els.length; i++) {
  for (let j = i + 1; j < els.length; j++) {
    const a = els[i], b = els[j];
    if (a.contains(b) || b.contains(a)) continue;
    const ra = visibleRect(a), rb = visibleRect(b);
    const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
    const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
    if (w > 2 && h > 2 && getComputedStyle(a).position !== 'sticky' && getComputedStyle(b).position !== 'sticky'
        && !a.closest('.overlay-ok') && !b.closest('.overlay-ok'))
      problems.push(`${a.tagName}.${a.className} overlaps ${b.tagName}.${b.className}`);
  }
}
const text = document.body.innerText;
if (/[{\[]\s*"[a-z_]+"\s*:/.test(text)) problems.push('raw JSON visible');
return problems;
"""


def layout_problems(driver) -> list[str]:
    return driver.execute_script(LAYOUT_PROBLEMS_JS)


def screenshot_both(driver, directory: Path, name: str) -> list[str]:
    """Screenshots at desktop and phone widths; returns layout problems found at either."""
    problems = []
    for label, (w, h) in (("desktop", DESKTOP), ("phone", PHONE)):
        driver.set_window_size(w, h)
        time.sleep(0.3)
        driver.save_screenshot(str(directory / f"{name}_{label}_{w}x{h}.png"))
        problems += [f"{label}: {p}" for p in layout_problems(driver)]
    driver.set_window_size(*DESKTOP)
    return problems


# ---------------------------------------------------------------- the chat page (turnbased.html)


def snapshot(driver) -> dict | None:
    """The chat page's state (``window.omni``): None before its script ran."""
    return driver.execute_script(
        "const o = window.omni; return o ? {state: o.state, messages: o.messages, playedMs: o.playedMs,"
        " error: o.error, deltaCount: o.deltaCount, alert: o.alert, shareUrl: o.shareUrl} : null;"
    )


def open_chat(launch, stack, wav: Path, voice: bool = True):
    """A browser (``launch`` fixture) on the stack's chat page, presets loaded, spoken replies on or off."""
    from selenium.webdriver.common.by import By

    browser = launch(wav)
    browser.get(f"{stack.url}/turnbased.html")
    # Presets arrive from /api/presets and fill the settings; wait so they do not overwrite ours.
    assert wait_until(lambda: browser.execute_script("return document.querySelectorAll('#preset option').length"), 10)
    voice_box = browser.find_element(By.ID, "voice")
    if voice_box.is_selected() != voice:
        voice_box.click()
    return browser


def send_text(browser, text: str) -> None:
    """Type ``text`` into the chat box and press Enter."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = browser.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
