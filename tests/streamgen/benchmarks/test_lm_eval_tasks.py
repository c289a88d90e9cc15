"""``benchmarks=[lm_eval:TASK]``: lm-eval's own tasks through the grid, scored as lm-eval scores them.

Three task styles (tests/support/lm_eval_tasks.py) run once through workflows/full_grid.py on
``scripted-ar-constant`` (module fixture, ~40 s with Ray's start): a GSM8K-style task (regex filters,
exact_match with regexes_to_ignore), a few-shot task, a chat-template task (multi-turn few-shot, system
instruction). Each test names the fact on the way: the prompt lm-eval itself sends, what streams, the
designed verdicts (even documents score 1), then lm-eval's ``simple_evaluate`` on a model that replays
the grid's base answers, compared per document and in aggregate. A code task and a hub task are refused.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

lm_eval = pytest.importorskip(
    "lm_eval", reason="lm-evaluation-harness is not installed: pip install -e '.[lm-eval]' (CI must install the "
                      "lm_eval extra for these tests to run)")

from lm_eval.api.model import LM  # noqa: E402
from lm_eval.models.utils import postprocess_generated_text  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from streamgen.benchmarks import load_benchmark  # noqa: E402
from streamgen.config import (  # noqa: E402
    REPO_ROOT,
    ConfigError,
    grid_benchmark_config,
    grid_config,
    lm_eval_benchmark_config,
)
from tests.support.lm_eval_tasks import ANSWER, CHAT_OPTIONS, N_DOCS, TASKS, write_tasks  # noqa: E402

MODEL = "scripted-ar-constant"
METRICS = {"gsm_local": "exact_match,flexible-extract", "fewshot_local": "exact_match,none",
           "chat_local": "exact_match,none"}


def options(task: str) -> dict[str, Any]:
    return CHAT_OPTIONS if task == "chat_local" else {}


def overrides(task: str) -> list[str]:
    return [f"options.{k}={v}" for k, v in options(task).items()]


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("lm_eval"))


@pytest.fixture(scope="module")
def grid_run(tasks_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One grid over the three tasks and ``stop_local``: (results dir, printed report)."""
    out = tmp_path_factory.mktemp("lm_eval_grid") / "results"
    chat = ",".join(overrides("chat_local"))
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "workflows" / "full_grid.py"), "grid=scripted", f"models=[{MODEL}]",
         f"benchmarks=[{','.join('lm_eval:' + t for t in (*TASKS, 'stop_local'))}]", f"lm_eval_include_path={tasks_dir}",
         f"benchmark_overrides.lm_eval:chat_local=[{chat}]", f"limit={N_DOCS}", f"shard_size={N_DOCS}",
         "workers=1", f"results_dir={out}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout + proc.stderr


def pairs_of(results: Path, task: str) -> list[dict[str, Any]]:
    rows = [r for f in sorted((results / "pairs").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return sorted((r for r in rows if r["benchmark"] == f"lm_eval:{task}"), key=lambda r: int(r["example_id"]))


class ReplayLM(LM):
    """An lm-eval model that answers each document with a stored answer, cut at ``until`` as lm-eval's
    HF model cuts its generations; it records the context lm-eval built for each document."""

    def __init__(self, answers: dict[int, str]) -> None:
        super().__init__()
        self.answers, self.contexts = answers, {}

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        out = []
        for req in requests:
            context, gen_kwargs = req.args
            self.contexts[req.doc_id] = context
            out.append(postprocess_generated_text(self.answers[req.doc_id], gen_kwargs.get("until"), None))
        return out

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
        raise NotImplementedError("generation tasks only")

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
        raise NotImplementedError("generation tasks only")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return json.dumps(chat_history)  # the turns themselves, to compare with the grid's

    @property
    def tokenizer_name(self) -> str:
        return "replay"

    def chat_template(self, chat_template: bool | str = False) -> str:
        return "replay"


def lm_eval_run(tasks_dir: Path, task: str, answers: dict[int, str]) -> tuple[dict[str, Any], ReplayLM]:
    """lm-eval's own evaluation of ``answers`` on ``task``'s first N_DOCS documents."""
    lm, opts = ReplayLM(answers), options(task)
    out = lm_eval.simple_evaluate(
        model=lm, tasks=[task], task_manager=TaskManager(include_path=str(tasks_dir), include_defaults=False),
        limit=N_DOCS, apply_chat_template=bool(opts.get("apply_chat_template", False)),
        fewshot_as_multiturn=bool(opts.get("fewshot_as_multiturn", True)),
        system_instruction=opts.get("system_instruction"), log_samples=True)
    return out, lm


@pytest.mark.parametrize("task", TASKS)
def test_prompt_is_lm_evals_and_only_the_document_streams(tasks_dir: Path, task: str) -> None:
    bench = load_benchmark(lm_eval_benchmark_config(f"lm_eval:{task}", str(tasks_dir), overrides(task)))
    examples = bench.examples(limit=N_DOCS)
    _, lm = lm_eval_run(tasks_dir, task, {i: ANSWER for i in range(N_DOCS)})
    for ex in examples:
        segs = bench.segments(ex)
        own = segs[-1]
        assert "".join(segs) == ex.request and len(segs) == 4 and own.endswith(":")  # doc_to_text's 3 sentences + cue
        sent = lm.contexts[int(ex.example_id)]
        if task == "chat_local":  # lm-eval's turns: system instruction + description, one few-shot turn, the doc
            assert json.loads(sent) == ex.messages()
            assert ex.system_prompt == "Reply with the code word only.\n\nEach box holds one card."
            assert [m["role"] for m in ex.history] == ["user", "assistant"] and segs[0].startswith("Q: Box ")
        else:  # one user turn, as lm-eval's plain context
            assert sent == ex.request and not ex.history and ex.system_prompt is None
        if task == "fewshot_local":  # two few-shot examples, lm-eval's separators, all in the first segment
            assert segs[0].count("\nA: ") == 2 and segs[0].count("\n\n") == 2
            assert segs[0].startswith("Q: Box 10") and segs[0].endswith(f"Q: Box {ex.example_id} holds a card. ")


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.integration
@pytest.mark.slow
def test_grid_quality_equals_lm_evals_for_the_same_answers(grid_run: tuple[Path, str], tasks_dir: Path,
                                                           task: str) -> None:
    pairs = pairs_of(grid_run[0], task)
    assert [p["example_id"] for p in pairs] == [str(i) for i in range(N_DOCS)]
    assert {p["base_answer"] for p in pairs} == {ANSWER} and {p["excluded_reason"] for p in pairs} == {None}
    assert [p["base_quality"] for p in pairs] == [1.0, 0.0, 1.0, 0.0]  # by design: even documents' word is ABCDEF
    out, _ = lm_eval_run(tasks_dir, task, {int(p["example_id"]): p["base_answer"] for p in pairs})
    metric = METRICS[task]
    name, filter_name = metric.split(",")
    samples = sorted((s for s in out["samples"][task] if s["filter"] == filter_name), key=lambda s: s["doc_id"])
    assert [float(s[name]) for s in samples] == [p["base_quality"] for p in pairs]
    assert out["results"][task][metric] == pytest.approx(sum(p["base_quality"] for p in pairs) / len(pairs))
    assert [p["stream_quality"] for p in pairs] == [p["base_quality"] for p in pairs]  # greedy: same answers


def test_answers_are_cut_at_until_and_filtered_as_lm_eval_does(tasks_dir: Path) -> None:
    """Answers that run past a stop string: the GSM8K-style flexible filter takes the *last* word, so an
    uncut answer would score the word after ``Question:``."""
    bench = load_benchmark(lm_eval_benchmark_config("lm_eval:gsm_local", str(tasks_dir)))
    examples = bench.examples(limit=N_DOCS)
    answers = {0: "XYZ\nQuestion: ABCDEF", 1: "It is XYZ.", 2: "ABCDEF then ABCDEF", 3: "#### ABCDEF<|im_end|>XYZ"}
    ours = [bench.score(ex, answers[int(ex.example_id)]) for ex in examples]
    assert [s.quality for s in ours] == [0.0, 1.0, 1.0, 0.0]  # document 0's ABCDEF came after "Question:"
    assert ours[0].detail == "[flexible-extract] XYZ"
    out, _ = lm_eval_run(tasks_dir, "gsm_local", answers)
    theirs = sorted((s for s in out["samples"]["gsm_local"] if s["filter"] == "flexible-extract"),
                    key=lambda s: s["doc_id"])
    assert [float(s["exact_match"]) for s in theirs] == [s.quality for s in ours]


@pytest.mark.integration
@pytest.mark.slow
def test_decoders_stop_at_until_and_the_score_is_the_cut_answers(grid_run: tuple[Path, str], tasks_dir: Path) -> None:
    """``stop_local``'s ``until: ["DE"]`` completes at the scripted answer's 5th token (``D``, ``E``: the string
    spans two): both sides stop there (AR: A = 5 forwards, no EOS), the kept-whole draft that ended costs 1,
    and the quality is what the stop-free answer ``ABCDEF`` scored, cut at ``DE`` by the scorer as before."""
    pairs = pairs_of(grid_run[0], "stop_local")
    assert [p["example_id"] for p in pairs] == [str(i) for i in range(N_DOCS)]
    a_tokens = len("ABCDE")  # one letter a token (tests/streamgen/decoding/test_stop_strings.py checks the design)
    for p in pairs:
        assert (p["base_answer"], p["stream_answer"]) == ("ABCDE", "ABCDE")
        assert (p["base_answer_tokens"], p["stream_answer_tokens"]) == (a_tokens, a_tokens)
        assert p["base_forwards"] == a_tokens and p["residual_forwards"] == 1
    bench = load_benchmark(lm_eval_benchmark_config("lm_eval:stop_local", str(tasks_dir)))
    assert bench.cfg.options["stop_strings"] == ["DE"]
    uncut = [bench.score(ex, ANSWER).quality for ex in bench.examples(limit=N_DOCS)]
    assert [p["base_quality"] for p in pairs] == uncut
    out, _ = lm_eval_run(tasks_dir, "stop_local", {int(p["example_id"]): p["base_answer"] for p in pairs})
    theirs = sorted((s for s in out["samples"]["stop_local"] if s["filter"] == "flexible-extract"),
                    key=lambda s: s["doc_id"])
    assert [float(s["exact_match"]) for s in theirs] == uncut
    assert {p["base_answer_tokens"] for p in pairs_of(grid_run[0], "gsm_local")} == {len(ANSWER) + 1}  # no stop: EOS


@pytest.mark.integration
@pytest.mark.slow
def test_rows_carry_the_task_and_the_report_names_its_metric(grid_run: tuple[Path, str]) -> None:
    results, report = grid_run
    for task in TASKS:
        pairs = pairs_of(results, task)
        version = "3.0" if task == "gsm_local" else "1.0"
        assert all(re.fullmatch(rf"{version}\+[0-9a-f]{{8}}\.[0-9a-f]{{8}}", p["benchmark_version"]) for p in pairs)
        assert {p["quality_metric"] for p in pairs} == {METRICS[task]}
        assert all(p["scorer_version"].startswith(f"lm_eval:{task}@{version}+") for p in pairs)
        assert re.search(rf"\| lm_eval:{task} \({METRICS[task]}\) \| 4 \| 50\.0 \| 50\.0 \|", report), report[-3000:]


@pytest.mark.integration
@pytest.mark.slow
def test_viewer_shows_the_tasks_examples(grid_run: tuple[Path, str], tmp_path: Path) -> None:
    from analysis.view import write_viewer

    write_viewer(grid_run[0], tmp_path)
    pages = "".join(p.read_text() for p in (tmp_path / "data").glob("cell-*.js"))
    assert "Box 3 holds a card. " in pages and "lm_eval:fewshot_local" in (tmp_path / "data" / "cells.js").read_text()


def test_version_follows_the_task_yaml_and_its_data_and_a_stale_plan_is_refused(tasks_dir: Path,
                                                                               tmp_path: Path) -> None:
    copy = tmp_path / "tasks"
    shutil.copytree(tasks_dir, copy)
    data = tasks_dir.parent / "data" / "test.jsonl"
    own_data = tmp_path / "test.jsonl"
    shutil.copyfile(data, own_data)
    yaml = copy / "gsm_local.yaml"
    yaml.write_text(yaml.read_text().replace(str(data), str(own_data)))

    def version() -> str:
        return load_benchmark(lm_eval_benchmark_config("lm_eval:gsm_local", str(copy))).cfg.version

    first = version()
    yaml.write_text(yaml.read_text() + "# edited\n")
    second = version()
    own_data.write_text(own_data.read_text() + own_data.read_text().splitlines()[0] + "\n")
    third = version()
    assert first.split("+")[0] == second.split("+")[0] == "3.0"
    assert first.split(".")[-2] != second.split(".")[-2] and first.split(".")[-1] == second.split(".")[-1]
    assert second.split(".")[-1] != third.split(".")[-1]  # the data's part
    stale = load_benchmark(lm_eval_benchmark_config("lm_eval:gsm_local", str(copy), [f"version={first}"]))
    with pytest.raises(ConfigError, match="changed since the grid was planned"):
        stale.examples(limit=1)


def test_code_task_is_refused_in_one_line(tasks_dir: Path) -> None:
    from jobs.grid.plan import plan_grid

    grid = grid_config("scripted", [f"models=[{MODEL}]", "benchmarks=[lm_eval:code_local]",
                                    f"lm_eval_include_path={tasks_dir}"])
    with pytest.raises(ConfigError) as err:
        plan_grid(grid)
    [line] = [p for p in err.value.problems if "code_local" in p]
    assert "unsafe_code" in line and "outside the project's sandbox" in line and "code_tests" in line


def test_hub_task_is_refused_before_any_model_loads(tasks_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jobs.run.driver

    def no_ray(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("Ray (and so a model actor) started for a grid that cannot run")

    monkeypatch.setattr(jobs.run.driver, "start_ray", no_ray)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    grid = grid_config("scripted", [f"models=[{MODEL}]", "benchmarks=[lm_eval:hub_gsm8k]",
                                    f"lm_eval_include_path={tasks_dir}", f"results_dir={tasks_dir.parent / 'hub'}"])
    with pytest.raises(ConfigError) as err:
        jobs.run.driver.run_grid(grid)
    [line] = [p for p in err.value.problems if "hub_gsm8k" in p]
    assert "'openai/gsm8k'" in line and "dataset_path: json" in line and "data_files" in line


@pytest.mark.integration
@pytest.mark.slow
def test_rescore_scores_the_stored_answers_again_alike(grid_run: tuple[Path, str]) -> None:
    """analysis.rescore finds the task through the config its run recorded, at the same version."""
    from analysis.rescore import RescoreConfig, rescore

    summary = rescore(grid_run[0], RescoreConfig(benchmarks=["lm_eval:gsm_local"], workers=1, force=True),
                      progress=False)
    assert (summary.scored_rows, summary.rescored, summary.skipped) == (N_DOCS, N_DOCS, 0)
    scores = [r for f in summary.files for r in pq.read_table(f).to_pylist()]
    assert sorted((int(r["example_id"]), r["base_quality"]) for r in scores) == [(0, 1.0), (1, 0.0), (2, 1.0), (3, 0.0)]


def test_grid_yaml_names_tasks_and_include_path(tasks_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    configs = tmp_path / "configs"
    shutil.copytree(REPO_ROOT / "configs", configs)
    (configs / "grid" / "mine.yaml").write_text(
        f"name: mine\nmodels: [{MODEL}]\nbenchmarks: [lm_eval:chat_local]\nlm_eval_include_path: {tasks_dir}\n"
        f"benchmark_overrides:\n  lm_eval:chat_local: {json.dumps(overrides('chat_local'))}\n")
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    cfg = grid_benchmark_config(grid_config("mine"), "lm_eval:chat_local")
    assert cfg.options == {"task": "chat_local", "include_path": str(tasks_dir), **CHAT_OPTIONS}
    assert load_benchmark(cfg).cfg.metric == "exact_match,none"
