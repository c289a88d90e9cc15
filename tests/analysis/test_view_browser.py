"""The results viewer opened from disk (file://) in headless chromium on a scripted grid's directory:
a known example's steps and kept / thrown spans are the rows', the filters count what the rows say; with
corrections, each step that rewrote earlier text carries a ⌫N mark, and the marks rebuild the request."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.view import read_js, write_viewer
from streamgen.models.scripted import SCRIPTS
from tests.support.browser_support import chromium
from tests.support.view_support import ERROR_EXAMPLE, scripted_plan, scripted_results

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = scripted_results(tmp_path_factory.mktemp("viewb") / "results")
    return root, write_viewer(root, threads=1).page


def test_a_known_example_shows_its_steps_and_spans(viewer: tuple[Path, Path]) -> None:
    root, page_path = viewer
    cells = read_js(page_path.parent / "data" / "cells.js")["cells"]
    (cell,) = [c for c in cells if c["model"] == "scripted-ar-prefix"]
    steps = sorted((s for f in (root / "steps").rglob("*.parquet") for s in pq.read_table(f).to_pylist()
                    if s["model"] == "scripted-ar-prefix" and s["example_id"] == "jfleg-test-1"), key=lambda s: s["step"])
    assert steps[-1]["accepted_tokens"] == SCRIPTS["prefix"].k  # the path under test: a part kept
    with chromium({"width": 1100, "height": 1200}) as browser:
        page = browser.new_page()
        page.goto(f"{page_path.as_uri()}#cell={cell['name']}&ex=jfleg-test-1")
        page.wait_for_function("document.body.dataset.example === 'jfleg-test-1'")
        rows = page.locator("#steps tbody tr")
        assert rows.count() == len(steps)
        for k, s in enumerate(steps):
            assert rows.nth(k).get_attribute("data-accepted") == str(s["accepted_tokens"])
            assert rows.nth(k).get_attribute("data-draft-in") == str(s["draft_tokens_in"])
            box = f"#drafts div[data-step='{s['step']}']"
            if s["draft_tokens_in"]:
                assert page.text_content(f"{box} .kept") == s["draft_kept_text"]
                assert page.text_content(f"{box} del.thrown") == s["draft_thrown_text"]
            seg = page.evaluate(f"document.querySelector(\"#request .seg[data-step='{s['step']}']\").firstChild.textContent")
            assert seg == s["arrived_text"]
        page.select_option("#filter", "part")
        assert page.get_attribute("#examples", "data-count") == "3"
        page.select_option("#filter", "error")
        assert page.locator("#examples tbody tr").first.get_attribute("data-example") == ERROR_EXAMPLE
        page.select_option("#cell", [c for c in cells if c["model"] == "scripted-ar-constant"][0]["name"])
        page.wait_for_function(f"document.body.dataset.cell !== '{cell['name']}'")
        page.select_option("#filter", "all")
        assert page.get_attribute("#examples", "data-count") == "3"
        assert page.inner_text("#message") == ""


# Word steps with a high typo rate: most scripted CoEdIT requests hold several steps that rewrite a typo.
CORRECTIONS = ("granularity=word", "corrections.typo_rate=0.2", "corrections.correction_delay_chars=2")


def test_a_step_that_rewrote_earlier_text_is_marked_and_the_marks_rebuild_the_request(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    root = scripted_results(tmp_path_factory.mktemp("viewc") / "results", limit=2, overrides=CORRECTIONS)
    plan = scripted_plan(root, 2, CORRECTIONS)
    page_path = write_viewer(root, threads=1).page
    model = "scripted-ar-prefix"
    by_example: dict[str, list[dict]] = {}
    for f in (root / "steps").rglob("*.parquet"):
        for s in pq.read_table(f).to_pylist():
            if s["model"] == model:
                by_example.setdefault(s["example_id"], []).append(s)
    example, steps = max(by_example.items(), key=lambda kv: sum(bool(s["chars_deleted"]) for s in kv[1]))
    steps.sort(key=lambda s: s["step"])
    edits = {s["step"]: s for s in steps if s["chars_deleted"]}
    assert edits, "the path under test: a step that deleted text a step before it sent"
    request = "".join(plan.segments[("coedit", example)])
    (cell,) = [c for c in read_js(page_path.parent / "data" / "cells.js")["cells"] if c["model"] == model]
    with chromium({"width": 1100, "height": 1200}) as browser:
        page = browser.new_page()
        page.goto(f"{page_path.as_uri()}#cell={cell['name']}&ex={example}")
        page.wait_for_function(f"document.body.dataset.example === {example!r}")
        pieces = page.evaluate("""[...document.querySelectorAll('#request > span')].map((e) => [
            e.className, e.classList.contains('seg') ? e.firstChild.textContent : e.textContent,
            e.dataset.step ?? null, e.title])""")
    assert sum(cls == "edit" for cls, *_ in pieces) == len(edits)
    screen = ""  # the user's screen, rebuilt from the page alone: a mark deletes, a segment appends
    for k, (cls, text, _step, title) in enumerate(pieces):
        if cls == "edit":
            (next_cls, _, next_step, _) = pieces[k + 1]  # a mark stands right before its step's text
            assert next_cls == "seg"
            row = edits[int(next_step)]
            assert text == f"⌫{row['chars_deleted']}"
            assert f"from character {row['first_change_char']}" in title
            assert len(screen) - row["chars_deleted"] == row["first_change_char"]
            screen = screen[:len(screen) - row["chars_deleted"]]
        else:
            screen += text
    assert screen == request
