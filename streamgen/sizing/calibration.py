"""Measured seconds per forward on the allocation's own device (``--calibrate``), replacing the roofline's.

For each model of a grid, its family's decoder (the very code a model actor runs, with its meter) decodes a
few synthetic requests of different lengths: one warm-up pass, then ``repeats`` timed passes, in as many
processes at once as the run has model actors sharing the CPU (``concurrent``; on a GPU one). Every model
call the meter records gives a point (tokens fed → seconds); per distinct width the median of its calls is
taken. A forward of T tokens then costs the medians interpolated linearly at T (below the narrowest width
its median; beyond the widest, the slope ``b`` of a least-squares line ``a + b·T`` through the medians,
every width weighted alike, held at ≥ 0), plus the decoder's own time between model calls per forward
(sampling, acceptance, rendering: ``between_s``) — :meth:`Fit.seconds`. The forward counts stay the family
rules'; only the seconds are measured.

The fits are cached in a JSON file (default ``<results_dir>/calibration.json``) keyed by the model's
fingerprint (its config, weights file identity where it has one), the device and the dtype: a later dry run
or run on the same machine reuses them; an entry of another model version or device is measured again (one
log line says so); a file that is not a calibration file stops with one line naming the fix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from streamgen.config import ESTIMATE_ONLY_MODEL_FIELDS, ConfigError, ModelConfig

log = logging.getLogger(__name__)

__all__ = ["CALIBRATION_FORMAT", "Fit", "calibrate_decoder", "calibrate_models", "device_label", "fit_line",
           "load_cache", "medians_by_width", "model_fingerprint", "save_cache"]

CALIBRATION_FORMAT = "streamgen-calibration/1"
# Prompts of three lengths (words of plain English): widths spread for the fit; each a user turn.
_WORDS = ("Write a short function that returns the sum of the squares of a list of numbers and explain it "
          "in one sentence, then give an example call and its result. ").split()
PROMPT_WORDS = (8, 60, 180)
CALIBRATION_BUDGET = 16  # answer tokens per calibration decode (the width of a one-token forward does not depend on it)


@dataclass(frozen=True)
class Fit:
    """One model's measured seconds per forward: ``a + b·T`` for T tokens fed, plus ``between_s`` (the
    decoder's own time per forward between model calls). ``points``: (width, median seconds) measured."""

    a: float
    b: float
    between_s: float
    points: tuple[tuple[int, float], ...]
    samples: int  # model calls timed (after the warm-up pass)

    def model_seconds(self, tokens: int) -> float:
        """One model call of ``tokens`` tokens: linear between the measured widths; below the narrowest,
        its median; beyond the widest, the widest's median + b per further token (the fitted slope)."""
        pts = self.points
        if not pts:
            return self.a + self.b * tokens
        if tokens <= pts[0][0]:
            return pts[0][1]
        for (w0, s0), (w1, s1) in pairwise(pts):
            if tokens <= w1:
                return s0 + (s1 - s0) * (tokens - w0) / (w1 - w0)
        return pts[-1][1] + self.b * (tokens - pts[-1][0])

    def seconds(self, tokens: int) -> float:
        """One forward of ``tokens`` tokens as a decode pays it: the model call and the time between calls."""
        return self.model_seconds(tokens) + self.between_s

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "between_s": self.between_s, "points": [list(p) for p in self.points],
                "samples": self.samples}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Fit:
        return Fit(float(d["a"]), float(d["b"]), float(d["between_s"]),
                   tuple((int(w), float(s)) for w, s in d["points"]), int(d["samples"]))


def medians_by_width(calls: Iterable[tuple[int, float]]) -> dict[int, float]:
    """Per distinct tokens-fed width, the median seconds of its calls."""
    by: defaultdict[int, list[float]] = defaultdict(list)
    for width, seconds in calls:
        by[int(width)].append(float(seconds))
    return {w: statistics.median(v) for w, v in sorted(by.items())}


def fit_line(points: Mapping[int, float]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of seconds = a + b·width over the points, each width weighted alike; one
    width (or a negative slope, noise on a flat curve): b = 0 and a = the points' mean; a negative
    intercept: the least-squares line through the origin (a = 0)."""
    if not points:
        raise ValueError("no points to fit")
    xs, ys = list(points), list(points.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    if b < 0:
        return my, 0.0
    if my - b * mx < 0:  # a line through the origin instead: no negative seconds at small widths
        return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return my - b * mx, b


def calibration_messages(words: Sequence[int] = PROMPT_WORDS) -> list[list[dict[str, str]]]:
    """One user turn per length in ``words``."""
    return [[{"role": "user", "content": " ".join(_WORDS[i % len(_WORDS)] for i in range(n))}] for n in words]


@dataclass(frozen=True)
class Timed:
    """The raw measurement of one decoder's timed passes: its model calls (tokens fed, seconds), and the
    decoder's own time between them with the forwards it spans."""

    calls: tuple[tuple[int, float], ...]
    between_s: float
    forwards: int


def time_decoder(decoder: Any, messages: Sequence[Sequence[Mapping[str, str]]], *, repeats: int = 3,
                 warmup: int = 1, ready: Callable[[], None] | None = None) -> Timed:
    """Decode every request of ``messages`` ``warmup`` times untimed, then ``repeats`` times; the model
    calls the decoder's meter records in the timed passes (``decoder.meter.calls``: tokens fed and
    seconds, on the meter's clock) and the time between them (each ``Generation.wall_s`` less its
    forwards' wall). ``ready``: called after the warm-up (concurrent calibrations start timing together)."""
    for _ in range(warmup):
        for m in messages:
            decoder.generate(list(m))
    if ready is not None:
        ready()
    start = len(decoder.meter.calls)
    between, forwards = 0.0, 0
    for _ in range(repeats):
        for m in messages:
            gen = decoder.generate(list(m))
            between += gen.wall_s - gen.meter.forward_wall_s
            forwards += gen.meter.forwards
    return Timed(tuple((c.tokens_fed, c.wall_s) for c in list(decoder.meter.calls)[start:]), between, forwards)


def fit_timed(timed: Sequence[Timed]) -> Fit:
    """One fit from one or more decoders' measurements (concurrent copies of one model): the median per
    width over all their calls, the line through the medians, the time between calls per forward."""
    calls = [c for t in timed for c in t.calls]
    if not calls:
        raise ValueError("the calibration decodes made no model call")
    points = medians_by_width(calls)
    a, b = fit_line(points)
    forwards = sum(t.forwards for t in timed)
    between = max(sum(t.between_s for t in timed), 0.0) / max(forwards, 1)
    return Fit(a, b, between, tuple(points.items()), len(calls))


def calibrate_decoder(decoder: Any, messages: Sequence[Sequence[Mapping[str, str]]], *, repeats: int = 3,
                      warmup: int = 1) -> Fit:
    """:func:`time_decoder` then :func:`fit_timed` for one decoder."""
    return fit_timed([time_decoder(decoder, messages, repeats=repeats, warmup=warmup)])


def device_label(device: str = "cpu", threads: int | None = None) -> str:
    """What a calibration was measured on: the GPU's name, or this CPU's model, cores and torch threads."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(0)}"
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"cpu:{cpu}:{os.cpu_count()} cores:{threads or torch.get_num_threads()} threads"


def model_fingerprint(cfg: ModelConfig) -> str:
    """The model's config (its estimate-only fields aside) and its weights file's size and mtime where it
    names a file: 16 hex characters."""
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ESTIMATE_ONLY_MODEL_FIELDS}
    weights = _weights_identity(cfg)
    blob = json.dumps({"config": fields, "weights": weights}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _weights_identity(cfg: ModelConfig) -> list[Any] | None:
    if cfg.source not in ("smollm2", "gemma3_270m", "gguf"):
        return None
    from streamgen.sizing.parameters import _gguf_path

    try:
        st = _gguf_path(cfg).stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def entry_key(fingerprint: str, device: str, dtype: str) -> str:
    return f"{fingerprint}|{device}|{dtype}"


def load_cache(path: str | Path, *, fmt: str = CALIBRATION_FORMAT,
               check: Callable[[Mapping[str, Any]], object] = lambda e: Fit.from_dict(e["fit"]),
               what: str = "a streamgen calibration", fix: str = "name another file with --calibrate=PATH"
               ) -> dict[str, dict[str, Any]]:
    """The entries of a cache file of format ``fmt`` (none if it does not exist), each read by ``check``;
    ConfigError in one line when the file is not one (``what``: what it should be, ``fix``: the way out).
    The pilot's cache (``jobs.run.pilot``) is one too, with its own format and check."""
    p = Path(path)
    if not p.exists():
        return {}
    try:
        data = json.loads(p.read_text())
        if not isinstance(data, dict) or data.get("format") != fmt:
            raise ValueError(f"no \"format\": \"{fmt}\"")
        entries = data["entries"]
        for e in entries.values():
            check(e)
        return dict(entries)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError([f"{'calibration' if fmt == CALIBRATION_FORMAT else 'pilot'} file {p} is not {what} "
                           f"({type(exc).__name__}: {exc}); move it away or {fix}"]) from exc


def save_cache(path: str | Path, entries: Mapping[str, Mapping[str, Any]], *, fmt: str = CALIBRATION_FORMAT) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps({"format": fmt, "entries": dict(entries)}, indent=1, sort_keys=True))
    os.replace(tmp, p)


@dataclass(frozen=True)
class Calibration:
    """Fits per model name, where they came from (measured now or read from ``path``) and the lines to print."""

    fits: Mapping[str, Fit]
    path: Path
    device: str
    notes: tuple[str, ...]


def calibrate_models(models: Mapping[str, ModelConfig], path: str | Path, *, device: str = "cpu",
                     threads: int = 1, repeats: int = 3, budget: int = CALIBRATION_BUDGET, concurrent: int = 1,
                     measure: Callable[[ModelConfig], Fit] | None = None) -> Calibration:
    """A fit per model: read from ``path`` where an entry of the same fingerprint, device, dtype and
    concurrency is there, else measured (``measure``; default: load the model and time its decoder,
    in ``concurrent`` processes at once on a CPU — the model actors that share its cores during a run)
    and written back. Stale entries (the model's name with another fingerprint or device) give one line each."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))  # a model actor's threads (restored at the end)
    try:
        return _calibrate(models, path, device, threads, repeats, budget, concurrent, measure)
    finally:
        torch.set_num_threads(before)


def _calibrate(models: Mapping[str, ModelConfig], path: str | Path, device: str, threads: int, repeats: int,
               budget: int, concurrent: int, measure: Callable[[ModelConfig], Fit] | None) -> Calibration:
    concurrent = max(1, concurrent) if device == "cpu" else 1
    label = device_label(device, threads) + (f":{concurrent} at once" if concurrent > 1 else "")
    entries = load_cache(path)
    fits, notes, changed = {}, [], False
    for name, cfg in models.items():
        key = entry_key(model_fingerprint(cfg), label, str(cfg.dtype))
        if key in entries:
            fits[name] = Fit.from_dict(entries[key]["fit"])
            notes.append(f"calibration of {name}: read from {path} (measured {entries[key].get('measured_at', '?')})")
            continue
        stale = [e for e in entries.values() if e.get("model") == name]
        if stale:
            notes.append(f"calibration of {name} in {path} is stale (measured for another model version, device or "
                         f"dtype: {stale[0].get('device')}, {stale[0].get('dtype')}); measuring again")
        t0 = time.perf_counter()
        try:
            fit = (measure or (lambda c: _measure(c, device, repeats, budget, threads, concurrent)))(cfg)
        except Exception as exc:  # noqa: BLE001 — weights not here, too big for this machine: priced by the roofline
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            notes.append(f"calibration of {name}: cannot time it here ({type(exc).__name__}: {first}); "
                         f"its estimate stays the roofline's")
            continue
        entries[key] = {"model": name, "device": label, "dtype": str(cfg.dtype), "fit": fit.as_dict(),
                        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
        fits[name], changed = fit, True
        notes.append(f"calibration of {name}: measured in {time.perf_counter() - t0:.1f} s ({fit.samples} model calls, "
                     f"{len(fit.points)} widths), written to {path}")
    if changed:
        save_cache(path, entries)
    return Calibration(fits, Path(path), label, tuple(notes))


def _measure(cfg: ModelConfig, device: str, repeats: int, budget: int, threads: int, concurrent: int) -> Fit:
    if concurrent == 1:
        return fit_timed([_time_model(cfg, device, repeats, budget, threads)])
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(concurrent)  # type: ignore[attr-defined]
        with ProcessPoolExecutor(concurrent, mp_context=ctx) as pool:
            jobs = [pool.submit(_time_model, cfg, device, repeats, budget, threads, barrier) for _ in range(concurrent)]
            return fit_timed([j.result() for j in jobs])


def _time_model(cfg: ModelConfig, device: str, repeats: int, budget: int, threads: int, barrier: Any = None) -> Timed:
    """Load ``cfg`` and time its decoder (in this process or a calibration child)."""
    import torch

    from streamgen.families.registry import load_decoder

    torch.set_num_threads(max(1, threads))
    decoder = load_decoder(cfg, device=device, max_new_tokens=budget)
    return time_decoder(decoder, calibration_messages(), repeats=repeats,
                        ready=(lambda: barrier.wait(timeout=1800)) if barrier is not None else None)
