"""Which project modules one example crosses from ``workflows/full_grid.py`` to its Parquet rows.

Runs a one-example, one-cell scripted grid through ``workflows.full_grid.main`` in ONE process (the
model actor and the scoring task run in-process: their Ray calls return ``ray.put`` of the in-process
result, so the driver, scheduler and writer run exactly as in a grid) under ``sys.setprofile``, and
prints (1) every project module whose code runs, in the order control first enters it, and (2) the
*spine*: the module call stacks at three moments of the example — the model's first forward, the
pair row's construction, the pairs file's write — merged into one call tree. A module that occupies
two places in that tree was entered twice (e.g. the driver calls the scheduler that calls back into
the driver). Import-time code is not counted, nor the summary tables printed after the rows are written.

    python bench/trace_modules.py [model=scripted-ar-prefix]
"""

from __future__ import annotations

import functools
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PACKAGES = ("workflows", "jobs", "streamgen", "analysis")


@functools.cache
def _module(filename: str) -> str | None:
    path = Path(filename)
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    if rel.parts[0] not in PACKAGES or path.suffix != ".py":
        return None
    return ".".join(rel.with_suffix("").parts)


def _stack(frame: Any) -> tuple[str, ...]:
    """The project modules on the call stack of ``frame``, outermost first, consecutive repeats merged."""
    out: list[str] = []
    while frame is not None:
        module = _module(frame.f_code.co_filename)
        if module is not None and (not out or out[-1] != module):
            out.append(module)
        frame = frame.f_back
    return tuple(reversed(out))


def _moment(frame: Any) -> str | None:
    """Which spine moment a call is: the first forward, the pair row, the pairs file write."""
    code = frame.f_code
    if code.co_name == "__init__" and type(frame.f_locals.get("self")).__name__ == "PairRecord":
        return "row"
    module = _module(code.co_filename) or ""
    if code.co_name == "generate" and module.startswith("streamgen.decoding"):
        return "decode"  # the base run's decode
    if code.co_name == "write_parquet_atomic" and "pairs" in str(frame.f_locals.get("path", "")):
        return "write"
    return None


class Tracer:
    """Records the order project modules first run in (calls only, not imports) and the spine stacks."""

    def __init__(self) -> None:
        self.sequence: list[str] = []
        self.stacks: dict[str, tuple[str, ...]] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name == "<module>":
            return
        module = _module(frame.f_code.co_filename)
        if module is not None and (not self.sequence or self.sequence[-1] != module):
            self.sequence.append(module)
        moment = _moment(frame)
        if moment is not None and moment not in self.stacks:
            stack = _stack(frame)
            self.stacks[moment] = stack[: next((i + 1 for i, m in enumerate(stack)
                                                if m.startswith("streamgen.decoding")), len(stack))]


def spine(stacks: dict[str, tuple[str, ...]]) -> tuple[list[tuple[int, str]], Counter[str]]:
    """The stacks merged into one call tree: its nodes (depth, module) in order, and how many nodes each
    module occupies (> 1: entered twice)."""
    nodes: list[tuple[str, ...]] = []
    for stack in stacks.values():
        for i in range(1, len(stack) + 1):
            if stack[:i] not in nodes:
                nodes.append(stack[:i])
    return [(len(n) - 1, n[-1]) for n in nodes], Counter(n[-1] for n in nodes)


def _in_process() -> None:
    """Make the driver's actor and CPU-worker task run in this process (results through ray.put)."""
    import ray

    from jobs.run import actors

    class _Method:
        def __init__(self, fn: Any) -> None:
            self.fn = fn

        def remote(self, *args: Any) -> Any:
            return ray.put(self.fn(*args))

    class _Actor:
        def __init__(self, model: Any, **_: Any) -> None:
            self.actor = actors.ModelActor(model)
            self.run_unit = _Method(self.actor.run_unit)

    for module in [m for name, m in sys.modules.items() if name.startswith("jobs.")]:
        for name, fn in list(vars(module).items()):  # wherever the driver side imported them
            if not callable(fn) or not getattr(fn, "__module__", "").startswith("jobs."):
                continue
            if name == "spawn_model_actor":
                setattr(module, name, lambda model, **kw: _Actor(model))
            elif name.startswith("remote_"):  # the CPU-worker task's submit (remote_score_unit)
                inner = getattr(sys.modules[fn.__module__], name.removeprefix("remote_"))
                setattr(module, name, lambda *args, _f=inner: ray.put(_f(*args)))
    ray.kill = lambda *a, **k: None  # the fake actors have no process to kill


def main(argv: list[str]) -> int:
    import jobs.run.driver  # noqa: F401  (imports the driver side, whose submit functions are replaced)
    import workflows.full_grid as full_grid

    model = next((a.split("=", 1)[1] for a in argv if a.startswith("model=")), "scripted-ar-prefix")
    _in_process()
    full_grid.print_summary = lambda *a, **k: None  # the rows are written before the summary
    tracer = Tracer()
    with tempfile.TemporaryDirectory() as out:
        args = ["grid=scripted", f"models=[{model}]", "limit=1", "workers=1", f"results_dir={out}"]
        threading.setprofile(tracer)
        sys.setprofile(tracer)
        try:
            rc = full_grid.main(args)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        rows = sorted(p.relative_to(out).as_posix() for p in Path(out).glob("*/**/*.parquet"))
    first = list(dict.fromkeys(tracer.sequence))
    print(f"exit code {rc}; files written: {rows}")
    print(f"every module whose code ran, in order of first entry ({len(first)}): {', '.join(first)}")
    tree, places = spine(tracer.stacks)
    print(f"spine (call stacks at: {', '.join(tracer.stacks)}), as one call tree:")
    for depth, m in tree:
        print(f"  {'  ' * depth}{m}{'   <- entered again' if places[m] > 1 else ''}")
    twice = sorted(m for m, n in places.items() if n > 1)
    print(f"spine modules: {len(places)}; entered more than once: {len(twice)} {twice}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
