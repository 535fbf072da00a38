"""The chat page (GET /) in headless Chromium, driven by Playwright (GGRS_SERVER_URL).

Chromium is the Debian package (`/usr/bin/chromium`, or CHROMIUM=path); Playwright only drives
it, it downloads no browser. The test skips, saying why, when either is missing.
GGRS_SCREENSHOT names the PNG written after a reply (default: target/chat-page.png; the
README's picture is docs/chat-page.png, made with a real model).
"""

import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import get_json

playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"

# Records every change of the last assistant bubble's text, with its time, in window.__growth.
WATCH_REPLY = """
() => {
  window.__growth = [];
  const log = document.getElementById('messages');
  new MutationObserver(() => {
    const bubbles = log.querySelectorAll('.msg.assistant');
    const last = bubbles[bubbles.length - 1];
    if (!last) return;
    const text = last.querySelector('.body').textContent;
    const prev = window.__growth[window.__growth.length - 1];
    if (!prev || prev.text !== text) {
      window.__growth.push({t: performance.now(), text, state: last.dataset.state});
    }
  }).observe(log, {subtree: true, childList: true, characterData: true, attributes: true});
}
"""


# Waits for the first text of the last reply, then clicks Stop at once; returns the reply's
# state at the moment of the click.
STOP_ON_FIRST_TEXT = """
() => new Promise((resolve, reject) => {
  const log = document.getElementById('messages');
  const check = () => {
    const last = [...log.querySelectorAll('.msg.assistant')].pop();
    if (!last || !last.querySelector('.body').textContent) return false;
    const state = last.dataset.state;
    document.getElementById('stop').click();
    resolve(state);
    return true;
  };
  if (check()) return;
  const obs = new MutationObserver(() => { if (check()) obs.disconnect(); });
  obs.observe(log, {subtree: true, childList: true, characterData: true, attributes: true});
  setTimeout(() => { obs.disconnect(); reject(new Error('no reply text within 60 s')); }, 60000);
})
"""


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser, base_url, api_key):
    context = browser.new_context(viewport={"width": 900, "height": 640}, color_scheme="light")
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(f"{base_url}/")
    if api_key:
        page.locator("summary").click()
        page.fill("#api-key", api_key)
        page.locator("summary").click()
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def throttle(page, bytes_per_s):
    """Slows the page's downloads (Chromium's DevTools network emulation).

    The tiny test model streams a whole reply in a fraction of a second, faster than the page
    paints (and than a person presses Stop); throttled, the same stream arrives over seconds,
    as a real model's does, so the checks below see it mid-way.
    """
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": bytes_per_s, "uploadThroughput": -1},
    )


def is_subsequence(shown, raw):
    """True when the characters of `shown` (rendered text: fences, backticks and some newlines
    dropped) appear in order in `raw` (the model's text)."""
    chars = iter(raw)
    return bool(shown) and all(c in chars for c in shown)


def last_reply(page):
    return page.locator(".msg.assistant").last


def send(page, text, max_tokens, temperature=0.7):
    page.locator("summary").click()
    page.fill("#max-tokens", str(max_tokens))
    page.fill("#temperature", str(temperature))
    page.locator("summary").click()
    page.evaluate(WATCH_REPLY)
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def wait_state(page, states, timeout_s):
    """Waits until the last reply's data-state is one of `states`; returns it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = last_reply(page).get_attribute("data-state")
        if state in states:
            return state
        time.sleep(0.02)
    raise AssertionError(f"reply state stayed {state!r}, expected one of {states}")


def test_streamed_reply(page, slot_ctx):
    assert page.title() == "ggrs chat"
    throttle(page, 64_000)
    send(page, "Write a Python function that checks whether a number is prime.", max_tokens=max(64, slot_ctx - 64))
    user = page.locator(".msg.user").last
    assert user.inner_text().endswith("Write a Python function that checks whether a number is prime.")
    assert page.is_enabled("#stop")
    assert wait_state(page, {"done", "stopped"}, 120) == "done"

    # The reply grew on screen: some text showed while it was still streaming. (Texts are not
    # compared as prefixes: a closing ` or ``` turns literal backticks into code elements.)
    growth = [g for g in page.evaluate("window.__growth") if g["text"]]
    final = last_reply(page).locator(".body").text_content()
    assert growth and growth[-1]["text"] == final
    partial = [g for g in growth if g["state"] == "streaming" and len(g["text"]) < len(final)]
    assert partial, f"no partial reply was shown before the end: {growth}"

    reply = last_reply(page)
    meta = reply.locator(".meta").inner_text()
    assert "tokens/s" in meta, meta
    assert page.is_enabled("#send") and page.is_disabled("#stop")
    assert page.input_value("#prompt") == ""

    shot = Path(os.environ.get("GGRS_SCREENSHOT") or REPO / "target" / "chat-page.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 1000


def slots_busy(base_url, api_key):
    """How many slots GET /slots reports as processing, or None when the endpoint is missing."""
    status, slots = get_json(f"{base_url}/slots", api_key)
    if status != 200 or not isinstance(slots, list):
        return None
    return sum(1 for s in slots if s.get("is_processing"))


def test_stop_cancels_and_page_stays_usable(page, base_url, api_key, slot_ctx):
    sent = []
    page.on(
        "request",
        lambda r: sent.append(r.post_data_json) if r.url.endswith("/v1/chat/completions") else None,
    )
    # A reply as long as the slot allows, so that it is still running when Stop is pressed.
    throttle(page, 16_000)
    send(page, "Tell me a very long story.", max_tokens=max(64, slot_ctx - 64))
    # Press Stop from inside the page as soon as the first text shows.
    state_at_stop = page.evaluate(STOP_ON_FIRST_TEXT)
    assert state_at_stop == "streaming", f"the reply ended before Stop (state {state_at_stop})"
    assert wait_state(page, {"stopped", "done", "error"}, 10) == "stopped"
    stopped_text = last_reply(page).locator(".body").text_content()
    assert "stopped" in last_reply(page).locator(".meta").inner_text()
    assert page.is_enabled("#send") and page.is_disabled("#stop")

    time.sleep(0.5)
    assert last_reply(page).locator(".body").text_content() == stopped_text, "text kept arriving after Stop"

    # The server frees the slot when the connection closes.
    busy = slots_busy(base_url, api_key)
    deadline = time.monotonic() + 5
    while busy and time.monotonic() < deadline:
        time.sleep(0.1)
        busy = slots_busy(base_url, api_key)
    assert not busy, "a slot is still processing after Stop"

    # The conversation goes on: a second message gets a full reply.
    send(page, "And now a short one.", max_tokens=8)
    assert wait_state(page, {"done", "stopped"}, 120) == "done"
    assert page.locator(".msg.assistant").count() == 2
    assert page.locator(".msg.user").count() == 2
    # The stopped reply stays in the conversation, as far as it went.
    turns = [m for m in sent[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in turns] == ["user", "assistant", "user"]
    assert is_subsequence(stopped_text, turns[1]["content"]), (stopped_text, turns[1]["content"])


FIRST_TEXT = (
    "() => { const b = [...document.querySelectorAll('.msg.assistant')].pop();"
    " return b && b.querySelector('.body').textContent.length > 0; }"
)


def test_new_chat_during_a_reply_starts_over(page, slot_ctx):
    sent = []
    page.on(
        "request",
        lambda r: sent.append(r.post_data_json) if r.url.endswith("/v1/chat/completions") else None,
    )
    throttle(page, 8_000)
    send(page, "First conversation.", max_tokens=max(64, slot_ctx - 64))
    page.wait_for_function(FIRST_TEXT, timeout=60_000)
    page.click("#new-chat")
    assert page.locator(".msg").count() == 0
    assert page.locator("#empty").is_visible()
    assert page.is_enabled("#send") and page.is_disabled("#stop")
    time.sleep(0.5)
    assert page.locator(".msg").count() == 0, "the old reply came back after New chat"

    send(page, "Second conversation.", max_tokens=4)
    assert wait_state(page, {"done"}, 120) == "done"
    assert page.locator(".msg").count() == 2
    turns = [m for m in sent[-1]["messages"] if m["role"] != "system"]
    assert turns == [{"role": "user", "content": "Second conversation."}]


def test_code_blocks_are_escaped_monospace(page):
    # Render a reply locally through the page's own renderer: feed it a fake stream.
    page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(
            status=200,
            headers={"Content-Type": "text/event-stream"},
            body=(
                'data: {"choices":[{"index":0,"delta":{"content":"Here:\\n```html\\n<b>x</b>"}}]}\n\n'
                'data: {"choices":[{"index":0,"delta":{"content":" & <img src=x onerror=alert(1)>\\n```\\nDone"}}]}\n\n'
                'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
                'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}}\n\n'
                "data: [DONE]\n\n"
            ),
        ),
    )
    send(page, "code please", max_tokens=16)
    assert wait_state(page, {"done"}, 10) == "done"
    reply = last_reply(page)
    code = reply.locator("pre > code")
    assert code.count() == 1
    assert code.text_content() == "<b>x</b> & <img src=x onerror=alert(1)>"
    assert code.get_attribute("data-lang") == "html"
    assert reply.locator("b, img").count() == 0
    family = code.evaluate("e => getComputedStyle(e).fontFamily")
    assert "mono" in family.lower()
    assert "9 tokens" in reply.locator(".meta").inner_text()


def test_settings_and_api_key_go_into_the_request(page):
    seen = []

    def answer(route):
        seen.append((route.request.post_data_json, route.request.headers))
        route.fulfill(
            status=200,
            headers={"Content-Type": "text/event-stream"},
            # The last event without its newline: the page still reads it.
            body='data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}',
        )

    page.route("**/v1/chat/completions", answer)
    page.locator("summary").click()
    page.fill("#system", "You are terse.")
    page.fill("#api-key", "sekret-123")
    page.locator("summary").click()
    send(page, "one", max_tokens=5, temperature=0.3)
    assert wait_state(page, {"done"}, 10) == "done"
    send(page, "two", max_tokens=6, temperature=0)
    assert wait_state(page, {"done"}, 10) == "done"

    body, headers = seen[-1]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "two"},
    ]
    assert body["temperature"] == 0 and body["max_tokens"] == 6
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert headers["authorization"] == "Bearer sekret-123"
    assert seen[0][0]["temperature"] == 0.3 and seen[0][0]["max_tokens"] == 5

    # Settings survive a reload (localStorage).
    page.reload()
    assert page.input_value("#system") == "You are terse."
    assert page.input_value("#max-tokens") == "6"


def test_http_errors_are_shown(page):
    page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(
            status=401,
            headers={"Content-Type": "application/json"},
            body='{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}',
        ),
    )
    send(page, "hello?", max_tokens=4)
    alert = page.locator(".error[role=alert]")
    alert.wait_for(timeout=10_000)
    assert "API key" in alert.inner_text() and "Invalid API Key" in alert.inner_text()
    assert page.evaluate("document.getElementById('settings').open")
    assert page.input_value("#prompt") == "hello?"
    assert page.locator(".msg").count() == 0

    page.unroute("**/v1/chat/completions")
    page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(
            status=503,
            headers={"Content-Type": "application/json", "Retry-After": "2"},
            body='{"error":{"message":"server busy","type":"unavailable_error","code":503}}',
        ),
    )
    page.press("#prompt", "Enter")
    page.wait_for_function("() => document.querySelectorAll('.error').length === 2")
    assert "busy" in page.locator(".error").last.inner_text()
    assert "Retry in 2 s" in page.locator(".error").last.inner_text()
