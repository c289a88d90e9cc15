"""A benchmark from data alone (``module: data``): HumanEval in that form, the scorers, the one-message
errors, the dry run and the leakage guard. The grid run of a data-only benchmark is in
tests/streamgen/benchmarks/test_benchmark_from_data_grid.py (integration)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamgen.adapt.config import SourceSettings
from streamgen.adapt.leakage import LeakageError
from streamgen.adapt.sources import load_requests
from streamgen.benchmarks import load_benchmark
from streamgen.benchmarks.code_benchmark import SCORER_VERSION as CODE_VERSION
from streamgen.config import REPO_ROOT, ConfigError, benchmark_config, default_data_dir
from streamgen.requests.segment import segment
from streamgen.scoring.extract import fence

NAME = "tinyqa"
ROWS = [  # authored for these tests; two sentences each, so no request is a single segment
    {"qid": "q1", "question": "Spell the first six letters. Write them in capitals.", "answers": ["ABCDEF", "a b c d e f"],
     "topic": "letters"},
    {"qid": "q2", "question": "Name three colours. Keep it short.", "answers": ["red green yellow"], "topic": "colours"},
]
BASE: dict[str, Any] = {
    "name": NAME, "version": "1", "module": "data", "source": "local", "data_file": "tinyqa/tinyqa.jsonl",
    "prompt_template": "{question}", "answer_extraction": "text", "metric": "exact", "max_new_tokens": 16,
    "options": {"id_field": "qid", "references": "{answers}", "scorer": "exact"},
}


def write_data_benchmark(root: Path, spec: dict[str, Any] | None = None, rows: list[dict] | None = None) -> tuple[Path, Path]:
    """A copy of the configs folder holding the ``tinyqa`` benchmark YAML and a data dir holding its JSONL
    and MANIFEST line: the three things a data-only benchmark is. Returns (configs, data)."""
    configs, data = root / "configs", root / "data"
    shutil.copytree(REPO_ROOT / "configs", configs)
    (configs / "benchmarks" / f"{NAME}.yaml").write_text(yaml.safe_dump(spec or BASE))
    body = "".join(json.dumps(r) + "\n" for r in rows or ROWS).encode()
    (data / "tinyqa").mkdir(parents=True)
    (data / "tinyqa" / "tinyqa.jsonl").write_bytes(body)
    (data / "MANIFEST.tsv").write_text(
        "dataset\tfile\trows\tbytes\tsha256\tlicense\tupstream\n"
        f"tinyqa\ttinyqa/tinyqa.jsonl\t{len(rows or ROWS)}\t{len(body)}\t{hashlib.sha256(body).hexdigest()}\t"
        "CC0-1.0\tauthored for the tests\n")
    return configs, data


@pytest.fixture
def tinyqa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    configs, data = write_data_benchmark(tmp_path)
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    return data


def _with(**options: Any) -> dict[str, Any]:
    spec = json.loads(json.dumps(BASE))
    spec["options"].update(options)
    return spec


# ------------------------------------------------------------------------------------------
# HumanEval, moved to the data form
# ------------------------------------------------------------------------------------------


def test_humaneval_in_data_form_reads_the_upstream_rows() -> None:
    raw = [json.loads(line) for line in gzip.open(default_data_dir() / "humaneval/HumanEval.jsonl.gz", "rt")]
    cfg = benchmark_config("humaneval")
    assert cfg.module == "data"
    bench = load_benchmark(cfg)
    examples = bench.examples()
    assert [e.example_id for e in examples] == [r["task_id"] for r in raw] and len(raw) == 164
    first, row = examples[0], raw[0]
    assert first.request == row["prompt"] and first.history == () and first.system_prompt == cfg.system_prompt
    assert bench.segments(first) == segment(row["prompt"])
    assert bench.reference_answer(first) == fence(row["prompt"] + row["canonical_solution"])
    # a whole function that does not repeat the prompt: prompt first, then the answer, the tests, the check
    answer = "def has_close_elements(numbers, threshold):\n    return False"
    program, verdict, how = bench.program_or_verdict(first, fence(answer))  # type: ignore[attr-defined]
    assert verdict is None and how == "fenced"
    assert program == f"{row['prompt']}\n{answer}\n\n\n{row['test']}\n\ncheck(has_close_elements)\n"


def test_scorer_version_follows_the_scoring_keys_only() -> None:
    cfg = benchmark_config("humaneval")
    version = load_benchmark(cfg).scorer_version
    assert re.fullmatch(rf"data:[0-9a-f]{{8}}\+code:{CODE_VERSION}", version), version
    rescored = dataclasses.replace(cfg, options={**cfg.options, "program_template": "{solution}\n{tests}\n"})
    assert load_benchmark(rescored).scorer_version != version
    unscored = dataclasses.replace(cfg, system_prompt="other", options={**cfg.options, "identity_fields": ["prompt"],
                                                                            "history_field": "turns"})
    assert load_benchmark(unscored).scorer_version == version


# ------------------------------------------------------------------------------------------
# scorers: exact and f1, best over the references
# ------------------------------------------------------------------------------------------


def test_exact_scorer_passes_a_normalised_match_of_any_reference(tinyqa: Path) -> None:
    bench = load_benchmark(benchmark_config(NAME))
    q1, q2 = bench.examples(tinyqa)
    assert [q1.example_id, q2.example_id] == ["q1", "q2"] and q1.request == ROWS[0]["question"]
    assert bench.segments(q1) == ["Spell the first six letters. ", "Write them in capitals."]
    scores = bench.score_many([q1, q1, q1, q2], ["ABCDEF", "A B C D E F.", "ABCDEFG", "red green blue"])
    assert [(s.quality, s.status) for s in scores] == [(1.0, "passed"), (1.0, "passed"), (0.0, "failed"),
                                                       (0.0, "failed")]
    assert re.fullmatch(r"data:[0-9a-f]{8}\+exact:1", bench.scorer_version)


def test_f1_scorer_takes_the_best_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _with(scorer="f1")
    spec["metric"] = "f1"
    configs, data = write_data_benchmark(tmp_path, spec)
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    bench = load_benchmark(benchmark_config(NAME))
    q1, q2 = bench.examples(data)
    # "red green blue" vs "red green yellow": 2 of 3 tokens each way, F1 = 2/3
    assert bench.score(q2, "red green blue").quality == pytest.approx(2 / 3)
    # "a b c d e f" loses its article "a" (5 tokens); "b c" overlaps 2: P = 1, R = 2/5, F1 = 4/7;
    # against "ABCDEF" (one token) it scores 0: the best of the two is 4/7
    assert bench.score(q1, "b c").quality == pytest.approx(4 / 7) and bench.score(q1, "b c").status == "f1"


# ------------------------------------------------------------------------------------------
# one ConfigError per mistake, naming the YAML, the key and the fix
# ------------------------------------------------------------------------------------------

MISTAKES = [
    (_with(scorrer="exact"), "options.scorrer", "did you mean options.scorer"),
    (_with(scorer="bleu"), "options.scorer='bleu'", "exact, f1, code_tests"),
    (_with(scorer="code_tests", tests_field="answers"), "metric: pass@1", "set them"),
    (_with(tests_field="answers"), "options.tests_field", "scorer code_tests only"),
    (_with(id_field="id"), "options.id_field", "fix options.id_field"),
    (_with(references="{answer}"), "options.references", "'answer'"),
    (_with(segmentation="word"), "options.segmentation='word'", "granularity"),
    ({**BASE, "prompt_template": "{questoin}"}, "prompt_template", "fix prompt_template"),
]


@pytest.mark.parametrize(("spec", "key", "fix"), MISTAKES, ids=[m[1] for m in MISTAKES])
def test_each_mistake_is_one_config_error_naming_yaml_key_and_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  spec: dict, key: str, fix: str) -> None:
    configs, data = write_data_benchmark(tmp_path, spec)
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    with pytest.raises(ConfigError) as caught:
        load_benchmark(benchmark_config(NAME)).examples(data)
    assert len(caught.value.problems) == 1, caught.value.problems
    problem = caught.value.problems[0]
    assert f"configs/benchmarks/{NAME}.yaml" in problem and key in problem and fix in problem, problem


def test_dry_run_plan_lists_the_mistake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.grid.plan import plan_with_problems
    from streamgen.config import grid_config

    configs, data = write_data_benchmark(tmp_path, _with(id_field="id"))
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    grid = grid_config("scripted", ["models=[scripted-ar-constant]", f"benchmarks=[{NAME}]", f"data_dir={data}",
                                    f"results_dir={tmp_path / 'results'}"])
    plan, problems = plan_with_problems(grid)
    assert plan is None and [p for p in problems if "fix options.id_field" in p and NAME in p], problems


# ------------------------------------------------------------------------------------------
# leakage guard: a data-only benchmark's rows in a training file are refused, naming it
# ------------------------------------------------------------------------------------------


def _training_file(data: Path, name: str, rows: list[dict]) -> None:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (data / name).write_bytes(body)
    with (data / "MANIFEST.tsv").open("a") as f:
        f.write(f"train\t{name}\t{len(rows)}\t{len(body)}\t{hashlib.sha256(body).hexdigest()}\tCC0-1.0\ttests\n")


def test_training_rows_repeating_a_data_benchmark_are_refused_naming_it(tinyqa: Path) -> None:
    haiku = {"id": "t1", "text": "Write a haiku about rain. Make it sad."}
    # q2's question with other spacing and case: the same evaluation row
    _training_file(tinyqa, "leaky.jsonl", [haiku, {"id": "t2", "text": "name three colours.   KEEP it short."}])
    _training_file(tinyqa, "clean.jsonl", [haiku, {"id": "t3", "text": "ABCDEF"}])  # a 6-character answer identifies nothing
    with pytest.raises(LeakageError, match=f"1 row.*benchmark.*{NAME} .*example q2"):
        load_requests(SourceSettings(kind="rows", data_file="leaky.jsonl", request_field="text"), tinyqa)
    clean = load_requests(SourceSettings(kind="rows", data_file="clean.jsonl", request_field="text"), tinyqa)
    assert [r.request_id for r in clean] == ["t1", "t3"]


def test_content_check_catches_rows_the_shape_check_misses() -> None:
    from streamgen.adapt.leakage import check_rows, evaluation_index, evaluation_split
    from streamgen.benchmarks.sources import read_local

    data = default_data_dir()
    index = evaluation_index(data)
    humaneval = json.loads(gzip.open(data / "humaneval/HumanEval.jsonl.gz", "rt").readline())
    coedit = read_local(data, "coedit/jfleg_test_coedit_format.jsonl")[0]
    reshaped = [{"id": "a", "text": humaneval["prompt"]},  # a HumanEval prompt without HumanEval's fields
                {"id": "b", "messages": [{"role": "user", "content": coedit["src"].replace(": ", ":\n", 1)}]}]
    assert [evaluation_split(r) for r in reshaped] == [None, None]  # the shapes say nothing
    with pytest.raises(LeakageError, match=r"2 row.*coedit, humaneval.*example HumanEval/0"):
        check_rows(reshaped, "reshaped rows", index)
    check_rows(read_local(data, "train/mbpp_train.jsonl"), "MBPP train", index)  # the training split passes
