"""Benchmarks: configs, loading, rendering per paper §4, exclusions, and scoring through the real sandbox.

The fast tier checks a handful of references per benchmark; the full reference runs are in
``tests/streamgen/benchmarks/test_references.py`` (marker ``integration``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from streamgen.benchmarks import (
    EMPTY_ANSWER,
    SINGLE_SEGMENT,
    Benchmark,
    BenchmarkDataError,
    Example,
    empty_answer_reason,
    exclusion_reason,
    load_benchmark,
)
from streamgen.benchmarks.__main__ import main
from streamgen.benchmarks.canitedit import unedited_answer
from streamgen.benchmarks.check import check_answers, check_references
from streamgen.benchmarks.stats import markdown_table, segmentation_stats
from streamgen.config import ConfigError, available, benchmark_config, default_data_dir, validate_benchmark

EXPECTED_ROWS = {"humaneval": 164, "mbpp": 974, "mbpp-sanitized": 427, "canitedit": 105, "ds1000": 1000,
                 "coedit": 747, "chat": 80}
CODE = ("humaneval", "mbpp", "mbpp-sanitized", "canitedit")


@pytest.fixture(scope="module")
def data_dir() -> Path:
    return default_data_dir()  # the repository's data/ (conftest clears STREAMGEN_DATA_DIR)


def _bench(name: str, *overrides: str) -> Benchmark:
    return load_benchmark(benchmark_config(name, list(overrides)))


# ------------------------------------------------------------------------------------------
# configs and loading
# ------------------------------------------------------------------------------------------


def test_every_benchmark_yaml_validates_and_loads(data_dir: Path) -> None:
    assert set(available("benchmarks")) == set(EXPECTED_ROWS)
    for name, rows in EXPECTED_ROWS.items():
        cfg = benchmark_config(name)
        assert validate_benchmark(cfg, data_dir) == [], name
        assert cfg.version and cfg.module and cfg.prompt_template
        examples = load_benchmark(cfg).examples(data_dir)
        assert len(examples) == rows, name
        assert len({e.example_id for e in examples}) == rows, f"{name}: example ids not unique"
        assert all(e.benchmark == name and e.request and e.reference for e in examples), name


def test_limit_takes_the_first_examples_in_order(data_dir: Path) -> None:
    bench = _bench("humaneval")
    assert [e.example_id for e in bench.examples(data_dir, limit=3)] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]


def test_every_benchmark_yaml_names_a_listed_builder() -> None:
    from streamgen.benchmarks import BUILDERS

    modules = {benchmark_config(name).module for name in available("benchmarks")}
    # lm_eval has no YAML: benchmarks=[lm_eval:TASK] names it (streamgen.config.lm_eval_benchmark_config)
    modules.add(benchmark_config("lm_eval:any").module)
    assert modules == set(BUILDERS), "list each streamgen/benchmarks module with a build(cfg) in BUILDERS"
    # module: data is the benchmark from data alone, built by streamgen.benchmarks.from_data
    own = {"data": "from_data", "lm_eval": "lm_eval_task"}
    assert all(BUILDERS[m].__module__ == f"streamgen.benchmarks.{own.get(m, m)}" for m in BUILDERS)


def test_unknown_module_and_bad_template_and_missing_data_say_how_to_fix(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a module"):
        load_benchmark(dataclasses.replace(benchmark_config("humaneval"), module="nope"))
    with pytest.raises(BenchmarkDataError, match=r"\{text\}"):  # a Python benchmark's render
        bad = dataclasses.replace(benchmark_config("mbpp"), prompt_template="{nope}")
        load_benchmark(bad).examples(data_dir, limit=1)
    with pytest.raises(BenchmarkDataError, match="data_dir"):
        _bench("humaneval").examples(tmp_path)
    with pytest.raises(BenchmarkDataError, match="split"):
        _bench("mbpp", "options.split=nope").examples(data_dir)


def test_mbpp_split_selects_task_ids(data_dir: Path) -> None:
    test = _bench("mbpp", "options.split=test").examples(data_dir)
    assert len(test) == 500 and test[0].example_id == "mbpp/11" and test[-1].example_id == "mbpp/510"
    assert len(_bench("mbpp-sanitized", "options.split=test").examples(data_dir)) == 257


# ------------------------------------------------------------------------------------------
# rendering (paper §4)
# ------------------------------------------------------------------------------------------


def test_humaneval_and_ds1000_stream_the_specification_itself(data_dir: Path) -> None:
    raw = json.loads(__import__("gzip").open(data_dir / "humaneval/HumanEval.jsonl.gz", "rt").readline())
    ex = _bench("humaneval").examples(data_dir, limit=1)[0]
    assert ex.request == raw["prompt"] and ex.history == ()
    assert ex.system_prompt and "code block" in ex.system_prompt
    ds = _bench("ds1000").examples(data_dir, limit=1)[0]
    assert ds.request.startswith("Problem:") and ds.request.endswith("BEGIN SOLUTION\n<code>\n")


def test_mbpp_text_first_then_fenced_tests(data_dir: Path) -> None:
    ex = _bench("mbpp").examples(data_dir, limit=2)[1]
    assert ex.request.startswith("Write a function to find the similar elements")
    segs = _bench("mbpp").segments(ex)
    assert segs[-1].startswith("```python\nassert similar_elements(")
    assert ex.payload["entry_point"] == "similar_elements"


def test_canitedit_program_first_then_instruction(data_dir: Path) -> None:
    bench = _bench("canitedit")
    ex = bench.examples(data_dir, limit=1)[0]
    segs = bench.segments(ex)
    assert segs[0].startswith("```python\nclass Cipher:") and segs[0].rstrip().endswith("```")
    assert "".join(segs[1:]).startswith("Create a new method `caesar_cipher`")
    lazy = _bench("canitedit", "options.instruction=lazy").examples(data_dir, limit=1)[0]
    assert lazy.request.endswith("shifts every letter by a given amount.")


def test_chat_history_is_turn_one_and_turn_two_streams(data_dir: Path) -> None:
    ex = _bench("chat").examples(data_dir, limit=1)[0]
    assert [m["role"] for m in ex.history] == ["user", "assistant"]
    assert ex.history[0]["content"].startswith("Compose an engaging travel blog post")
    assert ex.request == "Rewrite your previous response. Start every sentence with the letter A."
    msgs = ex.messages(prefix="Rewrite your previous response. ")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"][1 - bool(ex.system_prompt):]
    assert msgs[-1]["content"] == "Rewrite your previous response. "
    single = _bench("chat", "options.turn=1").examples(data_dir, limit=1)[0]
    assert single.history == () and single.request.startswith("Compose")


def test_coedit_instruction_arrives_before_the_text(data_dir: Path) -> None:
    bench = _bench("coedit")
    ex = bench.examples(data_dir, limit=1)[0]
    assert bench.segments(ex) == ["Fix grammatical errors in this sentence:\n",
                                  "New and new technology has been introduced to the society ."]
    assert len(ex.payload["refs"]) == 4
    from streamgen.benchmarks.coedit import CoeditTask

    hub_row = {"_id": "x", "task": "gec", "src": "No instruction here. Just text.", "tgt": "t"}
    assert CoeditTask.example(bench.cfg, hub_row).request == "No instruction here. Just text."


def test_hub_shaped_chat_rows_use_the_last_exchange() -> None:
    from streamgen.benchmarks.chat import ChatTask

    row = {"prompt_id": "p1", "messages": [
        {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Tell me more. Please."}, {"role": "assistant", "content": "Sure."}]}
    ex = ChatTask.from_messages(benchmark_config("chat"), row, 0)
    assert ex is not None and ex.request == "Tell me more. Please." and ex.reference == "Sure."
    assert len(ex.history) == 2


# ------------------------------------------------------------------------------------------
# exclusions
# ------------------------------------------------------------------------------------------


def test_exclusion_reasons() -> None:
    ex = Example("b", "1", (), "One sentence only.", "ref")
    assert exclusion_reason(ex, ["One sentence only."]) == SINGLE_SEGMENT
    assert exclusion_reason(ex, ["One. ", "Two."]) is None
    assert empty_answer_reason("a", "b") is None
    assert empty_answer_reason("", "b") == f"{EMPTY_ANSWER}:base"
    assert empty_answer_reason("a", "  \n") == f"{EMPTY_ANSWER}:stream"
    assert empty_answer_reason(None, "") == f"{EMPTY_ANSWER}:base+stream"


# ------------------------------------------------------------------------------------------
# scoring: a handful of references pass, wrong answers fail (real sandbox)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CODE)
def test_a_few_references_pass_and_empty_answers_fail(name: str, data_dir: Path) -> None:
    bench = _bench(name)
    examples = bench.examples(data_dir, limit=3)
    report = check_references(bench, examples)
    assert report.passed == 3, report.failures
    empty = check_answers(bench, examples, lambda e: "")
    assert empty.passed == 0 and empty.statuses == {"failed": 3}


def test_wrong_humaneval_answers_fail(data_dir: Path) -> None:
    bench = _bench("humaneval")
    ex = bench.examples(data_dir, limit=1)[0]  # has_close_elements -> bool
    prints = "```python\ndef has_close_elements(numbers, threshold):\n    print(True)\n```"
    syntax = "```python\ndef has_close_elements(numbers, threshold)\n    return True\n```"
    loops = "```python\ndef has_close_elements(numbers, threshold):\n    while True:\n        pass\n```"
    body_only = ("    for i, a in enumerate(numbers):\n        for b in numbers[i + 1:]:\n"
                 "            if abs(a - b) < threshold:\n                return True\n    return False\n")
    scores = bench.score_many([ex] * 4, [prints, syntax, body_only, bench.reference_answer(ex)])
    assert [s.status for s in scores] == ["failed", "failed", "passed", "passed"]
    assert "SyntaxError" in scores[1].detail and scores[2].detail.startswith("[completion]")
    assert scores[0].quality == 0.0 and scores[3].quality == 1.0 and scores[3].backend
    timed = dataclasses.replace(bench.cfg, timeout_s=2.0)
    assert load_benchmark(timed).score(ex, loops).status == "timeout"


def test_canitedit_unedited_code_fails(data_dir: Path) -> None:
    bench = _bench("canitedit")
    examples = bench.examples(data_dir, limit=4)
    report = check_answers(bench, examples, unedited_answer)
    assert report.passed == 0, report.failures


def test_mbpp_function_that_prints_fails(data_dir: Path) -> None:
    bench = _bench("mbpp-sanitized")
    ex = bench.examples(data_dir, limit=1)[0]
    answer = "```python\ndef similar_elements(a, b):\n    print(tuple(set(a) & set(b)))\n```"
    assert bench.score(ex, answer).status == "failed"


def test_text_benchmarks_score_references_as_one_and_others_lower(data_dir: Path) -> None:
    for name in ("coedit", "chat"):  # every reference (F1 runs in process: well under a second)
        bench = _bench(name)
        examples = bench.examples(data_dir)
        report = check_references(bench, examples)
        assert report.passed == len(examples) == EXPECTED_ROWS[name], report.failures
        scores = bench.score_many(examples[:5], ["completely unrelated words"] * 5)
        assert all(s.status == "f1" and s.quality < 0.5 for s in scores)
    # a reference that is only a fenced JSON block: the fenced answer and its bare body both score 1
    chat = _bench("chat")
    (ex,) = [e for e in chat.examples(data_dir) if e.example_id == "mt_bench/131/turn2"]
    assert ex.reference.startswith("```json\n") and ex.reference.endswith("```")
    body = ex.reference.removeprefix("```json\n").removesuffix("```")
    assert chat.score(ex, ex.reference).quality == 1.0 and chat.score(ex, body).quality == 1.0
    coedit = _bench("coedit")
    ex = coedit.examples(data_dir, limit=1)[0]
    assert coedit.score(ex, ex.payload["refs"][2]).quality == 1.0  # any of the four references
    assert coedit.score(ex, "").quality == 0.0


def test_ds1000_references_pass_in_its_interpreter(data_dir: Path) -> None:
    bench = _bench("ds1000")
    if bench.problems():
        pytest.skip(f"DS-1000 interpreter missing: {bench.problems()}")
    by_id = {e.example_id: e for e in bench.examples(data_dir)}
    # 820: a function-style reference with "### END SOLUTION" inside (must not be cut there).
    examples = [by_id[f"ds1000/{i}"] for i in (0, 1, 291, 820)]
    assert check_references(bench, examples).passed == 4
    assert check_answers(bench, examples, lambda e: "```python\nresult = None\n```").passed == 0


def test_ds1000_extraction_keeps_inner_markers_and_drops_the_trailing_newline(data_dir: Path) -> None:
    bench = _bench("ds1000")
    by_id = {e.example_id: e for e in bench.examples(data_dir)}
    task = bench.task  # type: ignore[attr-defined]
    code = task.extract(by_id["ds1000/820"], by_id["ds1000/820"].reference).code
    assert "### END SOLUTION" in code and code.endswith("return result")
    # 701's context continues the inserted line: "[insert].numpy()"
    code701 = task.extract(by_id["ds1000/701"], "```python\nresult = f()\n```").code
    assert "test_execution('result = f()')" in task.program(by_id["ds1000/701"], code701)
    assert task.extract(by_id["ds1000/0"], "<code>\nresult = df\n</code>\nEND SOLUTION").code == "result = df"


# ------------------------------------------------------------------------------------------
# statistics and command line
# ------------------------------------------------------------------------------------------


def test_problems_name_the_missing_interpreter() -> None:
    assert _bench("humaneval").problems() == [] and _bench("chat").problems() == []
    missing = _bench("ds1000", "options.python=.venv-does-not-exist/bin/python").problems()
    assert len(missing) == 1 and "scripts/ds1000_env.sh" in missing[0]


def test_segmentation_stats_and_table(data_dir: Path) -> None:
    bench = _bench("coedit")
    stats = segmentation_stats(bench, bench.examples(data_dir, limit=20))
    assert stats.requests == 20 and stats.mean >= 2 and stats.excluded == 0
    assert markdown_table([stats]).splitlines()[2].startswith("| coedit | 20 |")


def test_cli_stats_and_check(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "coedit", "chat"]) == 0
    out = capsys.readouterr().out
    assert "| chat | 80 |" in out and "| coedit | 747 |" in out
    assert main(["check", "humaneval", "--limit", "2", "--workers", "1", "--expect", "2"]) == 0
    assert "humaneval: 2/2 pass" in capsys.readouterr().out
    assert main(["check", "chat", "--limit", "2", "--expect", "3"]) == 1
