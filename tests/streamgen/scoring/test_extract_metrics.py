"""Code extraction from chat answers and the quality metrics (pass@1, normalised token F1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgen.scoring.extract import defines, extract_code, extract_text, fence, fenced_blocks
from streamgen.scoring.metrics import (
    ExecutionVerdictError,
    best_token_f1,
    normalize_text,
    pass_at_1,
    pass_at_k,
    token_f1,
)

PROMPT = 'def add(a, b):\n    """Add two numbers."""\n'

# ------------------------------------------------------------------------------------------
# extraction
# ------------------------------------------------------------------------------------------


def test_fenced_block_with_prose_around() -> None:
    answer = "Sure! Here it is:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\nThis adds. Done."
    got = extract_code(answer, entry_point="add", prefix=PROMPT)
    assert got.how == "fenced"
    assert got.code == "def add(a, b):\n    return a + b\n"


def test_block_defining_the_entry_point_wins_over_earlier_blocks() -> None:
    answer = "```\npip install x\n```\n```py\nimport math\ndef add(a, b):\n    return a + b\n```\n```python\nprint(add(1, 2))\n```"
    assert extract_code(answer, entry_point="add").code.startswith("import math\ndef add")


def test_without_entry_point_the_longest_python_block_wins() -> None:
    answer = "```python\nx = 1\n```\n```python\nclass A:\n    pass\n\nclass B(A):\n    pass\n```\n```text\n" + "y\n" * 50 + "```"
    assert extract_code(answer).code.startswith("class A:")


def test_unclosed_fence_from_a_truncated_answer() -> None:
    got = extract_code("```python\ndef add(a, b):\n    return a +", entry_point="add")
    assert got.how == "fenced" and got.code == "def add(a, b):\n    return a +"


def test_long_fence_keeps_inner_backticks() -> None:
    code = 'doc = """\n```\nnot a fence end\n```\n"""\n'
    assert fenced_blocks(fence(code))[0].body == code


def test_bare_code_with_prose_after_it() -> None:
    answer = "def add(a, b):\n    return a + b\nThis function returns the sum."
    got = extract_code(answer, entry_point="add")
    assert got.how == "bare" and got.code == "def add(a, b):\n    return a + b"


def test_bare_code_after_an_intro_line() -> None:
    answer = "Here is my solution\nimport os\ndef add(a, b):\n    return a + b\n"
    assert extract_code(answer, entry_point="add").code == "import os\ndef add(a, b):\n    return a + b"


def test_completion_only_body_is_appended_to_the_prompt() -> None:
    got = extract_code("    return a + b\n", entry_point="add", prefix=PROMPT)
    assert got.how == "completion" and got.code == PROMPT + "    return a + b"
    got = extract_code("```python\nreturn a + b\n```", entry_point="add", prefix=PROMPT)
    assert got.how == "completion" and got.code == PROMPT + "    return a + b\n"


def test_empty_or_whitespace_answer_has_no_code() -> None:
    assert extract_code("", entry_point="add", prefix=PROMPT).how == "none"
    assert extract_code("  \n ```python\n\n```").how == "none"


def test_stop_markers_cut_ds1000_style_answers() -> None:
    got = extract_code("result = df.iloc[List]\n</code>\nEND SOLUTION\nmore text", stops=("</code>", "\nEND SOLUTION"))
    assert got.code == "result = df.iloc[List]"


def test_defines() -> None:
    assert defines("async def add(x):\n", "add") and defines("class add:\n", "add") and defines("add = f\n", "add")
    assert not defines("def adder(x):\n", "add") and not defines("x = add(1)\n", "add")


def test_extract_text() -> None:
    assert extract_text("  Hello world.\n") == "Hello world."
    assert extract_text("```\nFixed text .\n```") == "Fixed text ."
    assert extract_text("Intro\n```\nx\n```") == "Intro\n```\nx\n```"


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300))
def test_extraction_never_raises(answer: str) -> None:
    got = extract_code(answer, entry_point="f", prefix="def f():\n", stops=("</code>",))
    assert isinstance(got.code, str)


# ------------------------------------------------------------------------------------------
# metrics
# ------------------------------------------------------------------------------------------


def test_pass_at_1_refuses_non_verdicts() -> None:
    assert pass_at_1("passed") == 1.0
    assert pass_at_1("failed") == 0.0 and pass_at_1("timeout") == 0.0
    with pytest.raises(ExecutionVerdictError, match="rerun"):
        pass_at_1("error")
    with pytest.raises(ExecutionVerdictError):
        pass_at_1("PASSED")


def test_pass_at_k_matches_the_closed_form() -> None:
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - (3 / 5) * (2 / 4))
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_normalisation() -> None:
    assert normalize_text("The  Cat, sat! On a MAT .") == "cat sat on mat"
    assert normalize_text("«Ｆｕｌｌ» width") == "full width"


def test_token_f1_values() -> None:
    assert token_f1("the cat sat", "The cat sat.") == 1.0
    assert token_f1("cat", "dog") == 0.0
    # pred {cat, sat, down}, ref {cat, sat}: P = 2/3, R = 1 -> F1 = 0.8
    assert token_f1("cat sat down", "cat sat") == pytest.approx(0.8)
    assert token_f1("cat cat", "cat") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1("", "") == 1.0 and token_f1("", "x") == 0.0 and token_f1("the", "x") == 0.0


def test_best_token_f1_takes_the_best_reference() -> None:
    assert best_token_f1("new technology", ["old stuff", "new technology"]) == 1.0
    with pytest.raises(ValueError):
        best_token_f1("x", [])


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=80), st.text(max_size=80))
def test_token_f1_is_symmetric_and_bounded(a: str, b: str) -> None:
    assert 0.0 <= token_f1(a, b) <= 1.0
    assert token_f1(a, b) == pytest.approx(token_f1(b, a))
