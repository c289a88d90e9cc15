"""Find an lm-eval task and refuse, before its data is read, what the grid cannot run honestly.

:func:`load_task` looks the task up with lm-eval's :class:`~lm_eval.tasks.TaskManager`, checks its YAML
(:func:`task_problems`) and only then lets lm-eval build it (which reads the data). Refused, each in one
line naming the fix:

- **hub data**: ``dataset_path`` other than local files (``json``, ``csv``, ``parquet``, ``text``,
  ``arrow`` with ``dataset_kwargs.data_files`` that exist, or a local folder). The grid is offline by
  design; the message names the dataset and shows the override.
- **code-executing metrics** (``unsafe_code: true``, or a ``code_eval`` metric): lm-eval would run
  model-written code in this process, outside the project's sandbox (docs/sandbox.md).
- **other output types** than ``generate_until``, and (:func:`metric_problems`) metrics whose
  aggregation is not the mean of per-document values in [0, 1] with higher better: the report's quality
  is the mean of per-example qualities, so only then does it equal lm-eval's aggregate.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.config import BenchmarkConfig, ConfigError

INSTALL_HINT = "install the optional extra: pip install -e '.[lm-eval]'"
LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")
"""``dataset_path`` values that read ``data_files`` from disk (the datasets library's packaged builders)."""
CODE_METRICS = ("code_eval",)
SHA_PREFIX = 8


@dataclass(frozen=True)
class LoadedTask:
    """An lm-eval task object with what the grid reads from it."""

    name: str
    where: str  # "benchmark lm_eval:TASK (path/to/task.yaml)": how every message names it
    task: Any  # lm_eval.api.task.ConfigurableTask
    yaml_path: Path
    data_paths: tuple[Path, ...]  # the local files its dataset reads, sorted
    version: str  # the task's metadata.version
    metrics: tuple[str, ...]  # its metric_list, in order
    filters: tuple[str, ...]  # its filter ensembles' names, in order ("none" without filter_list)


def _data_files(cfg: Mapping[str, Any]) -> list[str]:
    files = (cfg.get("dataset_kwargs") or {}).get("data_files") or []
    if isinstance(files, (str, Path)):
        return [str(files)]
    if isinstance(files, Mapping):
        return [str(f) for v in files.values() for f in ([v] if isinstance(v, (str, Path)) else v)]
    return [str(f) for f in files]


def hub_problem(where: str, cfg: Mapping[str, Any]) -> str | None:
    """One line when the task's data would come from a hub rather than local files; None when local."""
    path = cfg.get("dataset_path")
    if cfg.get("custom_dataset") is not None or (path and Path(str(path)).is_dir()):
        return None  # the task's own Python builds the dataset, or a local folder
    files = _data_files(cfg)
    if path in LOCAL_BUILDERS and files:
        missing = [f for f in files if "://" in f or not Path(f).is_file()]
        if not missing:
            return None
        return (f"{where}: its data files {missing} are not local files that exist; point "
                "dataset_kwargs.data_files at files on this machine (absolute paths, or relative to the directory "
                "the grid runs from)")
    name = f", dataset_name {cfg['dataset_name']!r}" if cfg.get("dataset_name") else ""
    return (f"{where}: its data would come from the hub dataset {path!r}{name}, and the grid runs offline. "
            "Copy the YAML into your lm_eval_include_path folder and point it at local files: "
            "`dataset_path: json` and `dataset_kwargs: {data_files: {test: /path/to/test.jsonl}}` "
            "(one file per split the task names: test_split, fewshot_split, ...)")


def task_problems(where: str, cfg: Mapping[str, Any]) -> list[str]:
    """What stops the grid from running the task whose YAML config is ``cfg``, read before any data."""
    p = []
    metrics = [str(m.get("metric")) for m in cfg.get("metric_list") or [] if isinstance(m, Mapping)]
    if cfg.get("unsafe_code") or any(m in CODE_METRICS for m in metrics):
        p.append(f"{where}: refused: its metric executes model-written code (unsafe_code), which lm-eval runs in "
                 "this process, outside the project's sandbox; score code with a data benchmark "
                 "(scorer: code_tests, docs/benchmarks.md), whose tests run in the sandbox")
    if cfg.get("output_type", "generate_until") != "generate_until":
        p.append(f"{where}: output_type is {cfg.get('output_type')!r}; the grid streams generation tasks only "
                 "(output_type: generate_until)")
    if (hub := hub_problem(where, cfg)) is not None:
        p.append(hub)
    return p


def _manager(include_path: str | None, task: str) -> Any:
    """lm-eval's TaskManager over ``include_path`` alone when it holds the task (indexing lm-eval's
    built-in folder takes ~30 s), else with the built-in tasks too."""
    from lm_eval.tasks import TaskManager

    if include_path:
        manager = TaskManager(include_path=include_path, include_defaults=False)
        if task in manager.task_index:
            return manager
    return TaskManager(include_path=include_path or None)


def load_task(cfg: BenchmarkConfig) -> LoadedTask:
    """The task ``cfg.options.task``, checked (:func:`task_problems`) before lm-eval reads its data."""
    from lm_eval.tasks._index import Kind

    name, include = str(cfg.options.get("task") or ""), cfg.options.get("include_path") or None
    manager = _manager(include, name)
    entry = manager.task_index.get(name)
    if entry is None:
        near = difflib.get_close_matches(name, manager.all_tasks, n=3)
        raise ConfigError([f"benchmark {cfg.name}: lm-eval has no task {name!r} "
                           f"(searched {include or 'no include path'} and lm-eval's built-in tasks); "
                           f"set lm_eval_include_path=DIR to the folder of its YAML{', or did you mean ' + str(near) if near else ''}"])
    where = f"benchmark {cfg.name} ({entry.yaml_path})"
    if entry.kind != Kind.TASK:
        raise ConfigError([f"{where}: {name!r} is a {entry.kind.name.lower()}, not one task; name one of its tasks"])
    if problems := task_problems(where, entry.cfg):
        raise ConfigError(problems, f"benchmark {cfg.name}: cannot run")
    task = manager.load([name])["tasks"][name]
    return LoadedTask(
        name=name, where=where, task=task, yaml_path=Path(entry.yaml_path),
        data_paths=tuple(sorted(Path(f).resolve() for f in _data_files(entry.cfg))),
        version=str((task.config.metadata or {}).get("version", "0")),
        metrics=tuple(task._metric_fn_list), filters=tuple(f.name for f in task._filters))


def task_fingerprint(loaded: LoadedTask) -> str:
    """``<8 hex of the task's folder>.<8 hex of its data files>``: the YAML and Python files next to the
    task's YAML (its ``include``s and ``!function`` helpers) and the bytes of every data file."""
    folder = hashlib.sha256()
    for path in sorted(p for p in loaded.yaml_path.parent.iterdir() if p.suffix in (".yaml", ".yml", ".py")):
        folder.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    data = hashlib.sha256()
    for path in loaded.data_paths:
        data.update(path.read_bytes())
    return f"{folder.hexdigest()[:SHA_PREFIX]}.{data.hexdigest()[:SHA_PREFIX]}"


def metric_problems(loaded: LoadedTask, metric: str) -> list[str]:
    """Why ``metric`` (``<metric>,<filter>``) cannot be the grid's per-example quality; empty when it can."""
    from lm_eval.api.metrics import mean

    name, _, filter_name = metric.partition(",")
    known = [f"{m},{f}" for m in loaded.metrics for f in loaded.filters]
    if name not in loaded.metrics or filter_name not in loaded.filters:
        return [f"{loaded.where}: metric={metric!r} is not one of the task's {known}; set metric= to one of them"]
    p = []
    if loaded.task.aggregation()[name] is not mean:
        p.append(f"{loaded.where}: metric {name} aggregates by {loaded.task.aggregation()[name].__name__}, not the "
                 "mean of per-document values; the report averages per-example quality, so it would differ "
                 f"from lm-eval's; pick a mean metric of {known}")
    if not loaded.task.higher_is_better().get(name, True):
        p.append(f"{loaded.where}: metric {name} is lower-is-better; the grid's quality is higher-is-better")
    return p
