"""The demo page in a real headless browser (Debian's chromium driven by playwright): a HumanEval
request typed character by character drafts while it is typed, and after submit the page shows the
greedy answer — equal to the base answer token for token — with its residual cost; two tabs keep
their own drafts; a request too long for the context gets a message and the page recovers.

Needs ``apt-get install chromium`` and ``pip install playwright`` (never ``playwright install``);
skips with the reason otherwise. Screenshots go to ``$ARTIFACTS`` (else pytest's tmp directory).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the demo needs its extra: pip install -e '.[demo]'")
from streamgen.benchmarks import load_benchmark
from streamgen.config import benchmark_config
from streamgen.decoding.base import draft_fingerprint
from streamgen.demo.server import create_app
from streamgen.requests.segment import segment
from tests.support.browser_support import chromium
from tests.support.demo_support import HeldClock, ServerThread, config, tiny_decoder, user

pytestmark = pytest.mark.integration

MAX_CONTEXT = 512  # tokens: the HumanEval request fits, a long paste does not
OTHER = "Sort a list of words by length. Ties keep their order. Explain briefly. Use Python."


def _humaneval_request() -> str:
    """HumanEval/13 (greatest common divisor): 3 sentence segments, short enough for a quick test."""
    bench = load_benchmark(benchmark_config("humaneval"))
    (example,) = [e for e in bench.examples(limit=14) if e.example_id == "HumanEval/13"]
    return example.request


@pytest.fixture(scope="module")
def decoder():
    return tiny_decoder(max_new_tokens=24, max_context=MAX_CONTEXT)


@pytest.fixture(scope="module")
def server(decoder):
    with ServerThread(lambda port: create_app(decoder, config(max_new_tokens=24), "tiny-llama", port=port)) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser():
    with chromium({"width": 1000, "height": 1100}) as context:
        yield context


@pytest.fixture
def artifacts(tmp_path) -> Path:
    out = Path(os.environ.get("ARTIFACTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _open(browser, server):
    page = browser.new_page()
    page.goto(server.url)
    page.wait_for_function("document.body.dataset.session !== undefined")
    return page


def _steps(page) -> int:
    return int(page.get_attribute("#status", "data-steps") or 0)


def _submit_and_wait(page) -> None:
    page.click("#submit")
    page.wait_for_function("document.body.dataset.status === 'done'", timeout=120_000)


def _tokens(page, selector: str) -> tuple[int, ...]:
    return tuple(int(t) for t in (page.get_attribute(selector, "data-tokens") or "").split(",") if t)


def test_typing_humaneval_drafts_and_lands_on_the_base_answer(browser, server, decoder, artifacts):
    text = _humaneval_request()
    assert len(segment(text)) >= 2
    page = _open(browser, server)
    page.locator("#request").press_sequentially(text, delay=5)  # one key event per character
    assert page.input_value("#request") == text
    page.wait_for_function("Number(document.getElementById('status').dataset.steps) >= 1", timeout=120_000)
    _submit_and_wait(page)
    assert _steps(page) >= 2  # at least one speculative step ran before the final one
    base = decoder.generate(user(text))
    assert _tokens(page, "#answer") == base.token_ids  # greedy: the stream answer is the base answer
    assert _tokens(page, "#base") == base.token_ids
    final = page.locator("#steps tbody tr").last.locator("td")
    assert final.nth(0).inner_text().endswith("final")
    generated = int(final.nth(4).inner_text())
    # residual forwards: the verify forward yields the bonus token, then one forward per further token
    residual = max(1, generated)
    assert page.inner_text("#residual").startswith(f"residual: {residual} forwards")
    assert page.get_attribute("#residual", "data-forwards") == str(residual)
    assert f"{len(base.token_ids)} forwards" in page.inner_text("#base")  # 1 prefill + 1 per further token
    assert "token for token: yes" in page.inner_text("#same")
    assert page.inner_text("#message") == ""
    page.screenshot(path=str(artifacts / "demo-humaneval.png"), full_page=True)
    assert (artifacts / "demo-humaneval.png").stat().st_size > 0
    page.close()


def test_two_tabs_do_not_see_each_others_drafts(browser, server, decoder):
    first, second = _humaneval_request(), OTHER
    a, b = _open(browser, server), _open(browser, server)
    assert a.evaluate("document.body.dataset.session") != b.evaluate("document.body.dataset.session")
    for seg_a, seg_b in zip(segment(first), segment(second), strict=False):  # interleaved typing
        a.locator("#request").press_sequentially(seg_a)
        b.locator("#request").press_sequentially(seg_b)
    a.locator("#request").press_sequentially("".join(segment(first)[len(segment(second)):]))
    b.locator("#request").press_sequentially("".join(segment(second)[len(segment(first)):]))
    for page, text in ((a, first), (b, second)):
        assert page.input_value("#request") == text
        _submit_and_wait(page)
        assert _tokens(page, "#answer") == decoder.generate(user(text)).token_ids
        assert page.inner_text("#status").startswith(f"segments {len(segment(text))} ")
        rows = page.locator("#steps tbody tr")
        chain = [(rows.nth(k).get_attribute("data-draft-in"), rows.nth(k).get_attribute("data-answer"))
                 for k in range(rows.count())]
        assert chain[0][0] == draft_fingerprint(())  # each tab's first step starts from no draft...
        assert all(after[0] == before[1] for before, after in zip(chain, chain[1:], strict=False))  # ...then its own
    assert _tokens(a, "#answer") != _tokens(b, "#answer")
    a.close(), b.close()


def test_a_submit_after_deleting_the_trailing_fragment_still_answers(browser, server, decoder):
    """Typed 'Hi there. How are', deleted back to 'Hi there. ', submitted: the submit adds no segment
    to the one already drafted, and the page still gets the final step and the base answer."""
    page = _open(browser, server)
    page.locator("#request").press_sequentially("Hi there. How are", delay=5)
    page.wait_for_function("Number(document.getElementById('status').dataset.steps) >= 1", timeout=120_000)
    for _ in range(len("How are")):
        page.locator("#request").press("Backspace")
    assert page.input_value("#request") == "Hi there. "
    _submit_and_wait(page)
    final = page.locator("#steps tbody tr").last.locator("td")
    assert final.nth(0).inner_text().endswith("final")
    assert _tokens(page, "#answer") == decoder.generate(user("Hi there. ")).token_ids
    assert "token for token: yes" in page.inner_text("#same")
    page.close()


def test_a_request_too_long_for_the_context_gets_a_message_and_the_page_recovers(browser, server, decoder):
    long = "Please add these numbers together carefully. " * 60
    assert decoder.count_request_tokens(user(long)) + decoder.max_new_tokens > MAX_CONTEXT
    page = _open(browser, server)
    page.fill("#request", long)
    page.wait_for_function("document.getElementById('message').textContent.includes('context')")
    assert _steps(page) == 0
    page.fill("#request", "")
    page.locator("#request").press_sequentially("Add two numbers. Return the sum.")
    page.wait_for_function("Number(document.getElementById('status').dataset.steps) >= 1", timeout=60_000)
    page.wait_for_function("document.getElementById('message').textContent === ''")
    _submit_and_wait(page)
    assert page.inner_text("#residual").startswith("residual: ")
    page.close()


def test_a_flood_of_keystrokes_gets_a_message_and_the_page_recovers(browser, decoder):
    text = "Add two numbers. Return their sum as a float. Handle negative numbers too."
    clock = HeldClock()  # held: updates never age out of the window, so the flood is certain on a slow machine
    limit = 3
    cfg = config(max_new_tokens=24, max_updates_per_s=float(limit))
    with ServerThread(lambda port: create_app(decoder, cfg, "tiny-llama", clock, port=port)) as srv:
        page = _open(browser, srv)
        clock.hold()
        # one update per keystroke at most (80 ms apart, one in flight): the page sends more than `limit`
        page.locator("#request").press_sequentially(text, delay=40)
        page.wait_for_function("document.getElementById('message').textContent.includes('too many updates')",
                               timeout=60_000)
        assert page.evaluate("document.body.dataset.refused") == "429"
        # time moves on past the window: the page sends the latest text again and the message clears
        clock.release(jump_s=2.0)
        page.wait_for_function("document.getElementById('message').textContent === ''", timeout=30_000)
        _submit_and_wait(page)
        assert _tokens(page, "#answer") == decoder.generate(user(text)).token_ids
        assert page.inner_text("#status").startswith(f"segments {len(segment(text))} ")
        page.close()


@pytest.mark.slow
def test_smollm2_page(browser, artifacts):
    """The real SmolLM2 behind the page: a short request typed by hand lands on the base answer."""
    from streamgen.config import model_config
    from streamgen.families.registry import load_decoder

    smol = load_decoder(model_config("smollm2"), max_new_tokens=48)
    text = "Write a Python function that returns the larger of two numbers. Keep it short. Add a docstring."
    with ServerThread(lambda port: create_app(smol, config(model="smollm2", max_new_tokens=48), "smollm2",
                                              port=port)) as srv:
        page = _open(browser, srv)
        page.locator("#request").press_sequentially(text, delay=60)  # about 16 characters a second
        page.wait_for_function("Number(document.getElementById('status').dataset.steps) >= 1", timeout=120_000)
        _submit_and_wait(page)
        assert _steps(page) >= 2
        assert _tokens(page, "#answer") == smol.generate(user(text)).token_ids
        page.screenshot(path=str(artifacts / "demo-smollm2.png"))
        page.close()
