"""Host syncs inside the timed span: a verify moves its values to the host a fixed number of times,
whatever the draft's length (docs/accounting.md, "Clean timing").

On CUDA every conversion of a device tensor to a Python value (``.item()``, ``.tolist()``, ``int(t)``,
``bool(t)``, ...) waits for the device. Here, on CPU, a ``TorchFunctionMode`` sees each such call: in
torch 2.13 the mode is handed ``Tensor.item``, ``tolist``, ``__bool__``, ``__int__``, ``__float__``,
``__index__``, ``__format__``, ``cpu``, ``numpy`` and ``to`` (checked: each appears by that name in the
mode when called on a plain tensor; iterating a tensor shows up only as ``unbind``, and its elements'
``int()`` calls are then counted one by one). Calls made inside the model's own modules are left out
(a depth counter on forward hooks): they are the model's, a fixed number per forward, not the
decoding loop's. The ``gpu`` test at the end checks the real thing with ``torch.cuda.set_sync_debug_mode``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from streamgen.acceptance_rules import Threshold
from streamgen.config import model_config
from streamgen.decoding.verification import accepted_length
from streamgen.families.registry import load_decoder

# conversions that return host values (each one a device sync on CUDA); `to` only towards the CPU
SYNCS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__format__", "cpu", "numpy",
                   "__array__", "__contains__", "equal", "allclose", "is_nonzero", "nonzero", "masked_select"})
MESSAGES = [{"role": "user", "content": "Write a function that adds two numbers. Then test it on a few inputs."}]
SHORT, LONG = 4, 32  # draft lengths; 32 is the tiny diffusion configs' gen_length (the verify scores all of it)


def _to_cpu(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``.to("cpu")`` written as such. A ``torch.device`` target is how code moves a tensor to the model's
    device, which on this CPU run is the CPU too: it cannot be told from a transfer here (transformers'
    mask helpers make several per call), so it is left to the ``gpu`` test."""
    targets = [*args[1:], kwargs.get("device")]
    return any(isinstance(t, str) and torch.device(t).type == "cpu" for t in targets)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


class SyncCounter(TorchFunctionMode):
    """Counts host conversions of *device* tensors made outside every module of ``model``.

    On a CPU run every tensor is a host tensor, so the mode tracks which ones would live on the
    accelerator: the model's parameters and outputs, tensors made with an explicit ``device=``, and
    everything computed from them. A CPU-side tensor (Dream's float32 schedule, ``torch.linspace``
    without a device) is host arithmetic, not a sync, and is not counted."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.depth = 0
        self.on_device: dict[int, weakref.ref[torch.Tensor]] = {}
        self.handles = []
        for module in model.modules():
            self.handles.append(module.register_forward_pre_hook(self._enter))
            self.handles.append(module.register_forward_hook(self._leave, always_call=True))
        for tensor in [*model.parameters(), *model.buffers()]:
            self._mark(tensor)

    def _mark(self, value: Any) -> None:
        for t in _tensors(value):
            self.on_device[id(t)] = weakref.ref(t)

    def _is_device(self, t: torch.Tensor) -> bool:
        ref = self.on_device.get(id(t))
        return ref is not None and ref() is t

    def _enter(self, *_: Any) -> None:
        self.depth += 1

    def _leave(self, _module: Any, _args: Any, output: Any) -> None:
        self.depth -= 1
        self._mark(output)

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        device_input = any(self._is_device(t) for t in _tensors([args, kwargs]))
        if self.depth == 0 and device_input and (name in SYNCS or (name == "to" and _to_cpu(args, kwargs))):
            self.calls.append(name)
        out = func(*args, **kwargs)
        if device_input or kwargs.get("device") is not None:
            self._mark(out)
        return out

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


@contextmanager
def counting_syncs(model: torch.nn.Module) -> Iterator[SyncCounter]:
    counter = SyncCounter(model)
    try:
        with counter:
            yield counter
    finally:
        counter.close()


def _draft(decoder: Any, n: int) -> list[int]:
    """``n`` ordinary tokens (no EOS, no mask), so the verify scores all ``n`` positions."""
    banned = set(decoder.eos_ids if hasattr(decoder, "eos_ids") else decoder.eos_token_ids)
    banned.add(getattr(decoder, "mask_id", -1))
    draft = [t for t in range(40, 40 + 2 * n) if t not in banned][:n]
    assert len(draft) == n
    return draft


def _module(decoder: Any) -> torch.nn.Module:
    return decoder.model


# Syncs per verify call, outside the model, derived from the code (streamgen/decoding/host.py):
# refusion / bidirectional / diffusion_gemma: `verification_from_probs` moves the argmax and the draft's
# probabilities together: 1. Nothing else of ours in score() reads a device value (the request, the draft
# and the cache positions are host lists; DiffusionGemma's block rows are built on the device). DiffusionGemma
# adds 1 that is transformers': its encoder call's attention-mask builder asks whether the padding mask is
# all ones (``masking_utils``, ``fast_all``), once per call, outside any module's forward.
SCORE_FAMILIES = {"tiny-refusion": 1, "tiny-llada": 1, "tiny-dream": 1, "tiny-diffusiongemma": 2}


def _score_syncs(name: str, n: int) -> tuple[list[str], int]:
    decoder = load_decoder(model_config(name), max_new_tokens=LONG)
    draft = _draft(decoder, n)
    forwards = len(decoder.meter.calls)
    with counting_syncs(_module(decoder)) as counter:
        verification = decoder.score(MESSAGES, draft)[0]
        accepted_length(draft, verification, Threshold(tau=0.0))
    assert len(verification.argmax) == n  # the path: every draft position was scored
    return counter.calls, len(decoder.meter.calls) - forwards


@pytest.mark.parametrize("name", sorted(SCORE_FAMILIES))
def test_a_verify_moves_its_values_once_whatever_the_draft_length(name: str) -> None:
    short, short_forwards = _score_syncs(name, SHORT)
    long, long_forwards = _score_syncs(name, LONG)
    calls = 2 if name == "tiny-diffusiongemma" else 1  # its verify: one encoder call + one decoder call
    assert short_forwards == long_forwards == calls
    assert len(short) == len(long)  # the intermediate fact: 8× the draft, not one more sync
    assert len(long) <= SCORE_FAMILIES[name], long


# The autoregressive verify is inside the stream step. With the budget equal to the draft's length and
# tau=0, the draft is kept whole and the step is exactly 1 forward (docs/accounting.md): render, verify,
# accept. Its syncs, derived: `rows_to_host` moves every row's argmax and top-2 margin with the draft's
# probabilities in one transfer: 1.
AR_VERIFY_SYNCS = 1


def _ar_step_syncs(n: int) -> list[str]:
    decoder = load_decoder(model_config("tiny-llama"), max_new_tokens=n)
    draft = _draft(decoder, n)
    session = decoder.open_stream()
    with counting_syncs(_module(decoder)) as counter:
        step = session.step(MESSAGES, draft, Threshold(tau=0.0))
    assert step.accepted_tokens == n and step.answer.forwards == 1  # the path: kept whole, one forward
    return counter.calls


def test_autoregressive_verify_step_syncs_do_not_grow_with_the_draft() -> None:
    short, long = _ar_step_syncs(SHORT), _ar_step_syncs(LONG)
    assert len(short) == len(long)
    assert len(long) <= AR_VERIFY_SYNCS, long


# Base runs: every family's loop (AR decode, ReFusion slots, LLaDA/Dream samplers, DiffusionGemma's
# canvas) reads a bounded number of host values per forward. Per forward, derived:
# AR: the argmax with the margin (1). ReFusion: plan 1, verify 1, infill predict 1, infill
# verify 1: 1 each. LLaDA / Dream: the sampler's tokens + confidences: 1. DiffusionGemma: per denoising
# step the stopping rule's verdict (1) plus the canvas's final argmax once (1 per canvas, ≤ 1 per step).
PER_FORWARD = {"tiny-llama": 1, "tiny-refusion": 1, "tiny-llada": 1, "tiny-dream": 1, "tiny-diffusiongemma": 2}


@pytest.mark.parametrize("name", sorted(PER_FORWARD))
def test_base_runs_read_a_bounded_number_of_host_values_per_forward(name: str) -> None:
    decoder = load_decoder(model_config(name), max_new_tokens=LONG)
    with counting_syncs(_module(decoder)) as counter:
        generation = decoder.generate(MESSAGES)
    assert generation.forwards >= 2  # the path: a loop of several forwards ran
    assert len(counter.calls) <= PER_FORWARD[name] * generation.forwards, counter.calls


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", sorted(SCORE_FAMILIES))
def test_no_sync_per_draft_token_on_cuda(name: str) -> None:
    """With sync debug mode "warn", torch warns at every synchronising call: the count of warnings for a
    32-token draft equals that of a 4-token draft (model-internal syncs included, a fixed number per call)."""
    decoder = load_decoder(model_config(name), device="cuda", max_new_tokens=LONG)

    def warnings_for(n: int) -> int:
        draft = _draft(decoder, n)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with pytest.warns(UserWarning) as record:
                decoder.score(MESSAGES, draft)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in record)

    warnings_for(SHORT)  # warm-up: the first call on the device initialises kernels
    short, long = warnings_for(SHORT), warnings_for(LONG)
    assert 0 < short == long
