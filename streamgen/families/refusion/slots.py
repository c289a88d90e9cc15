"""The ReFusion round loop: slots, committed KV, plan / verify / infill forwards (see refusion.py).

Kept apart from the decoder so the state machine reads in one sitting: :class:`SlotState` is what is
committed (tokens by position, KV in commit order), :class:`SlotEngine` runs rounds over it, and
:class:`KV` holds key/value tensors independently of transformers' cache classes (a fresh
``DynamicCache`` is built from them for every call, so no cache is ever cropped in place).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from streamgen.decoding.host import to_host
from streamgen.decoding.meter import ForwardMeter


class SlotSettings(Protocol):
    @property
    def slot_size(self) -> int: ...
    @property
    def slot_threshold(self) -> float: ...
    @property
    def token_threshold(self) -> float: ...
    @property
    def suppress_mask_logit(self) -> bool: ...


# --------------------------------------------------------------------------------------------
# Committed key/value tensors (batch 1), independent of transformers' cache classes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KV:
    """Per-layer (keys, values), each (batch, heads, tokens, head_dim)."""

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    @property
    def length(self) -> int:
        return int(self.layers[0][0].shape[-2]) if self.layers else 0

    def to_cache(self, batch: int = 1) -> Any:
        """A fresh DynamicCache over these tensors, repeated ``batch`` times along the batch axis.

        Its layers hold (expanded) views: the forward's ``update`` concatenates into new tensors, so
        nothing here is written. ``DynamicCache(ddp_cache_data=…)`` would first concatenate every layer
        onto an empty tensor — a copy of the whole KV per call, 2.6 % of ReFusion's decode time on tiny
        models (docs/experiments.md)."""
        from transformers import DynamicCache

        # (None, None) per layer: an empty DynamicLayer each, filled below as lazy_initialization + update
        # would leave it, without the copy
        cache: Any = DynamicCache(ddp_cache_data=[(None, None)] * len(self.layers))  # its layers: DynamicLayer
        for layer, (k, v) in zip(cache.layers, self.layers, strict=True):
            layer.device, layer.is_initialized = k.device, True
            layer.keys, layer.values = k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)
        return cache

    @staticmethod
    def from_cache(cache: Any, start: int, stop: int, row: int = 0) -> KV:
        return KV(tuple((lay.keys[row:row + 1, :, start:stop], lay.values[row:row + 1, :, start:stop])
                        for lay in cache.layers))

    def cat(self, *others: KV) -> KV:
        parts = [p for p in (self, *others) if p.layers]
        if not parts:
            return self
        return KV(tuple((torch.cat([p.layers[i][0] for p in parts], -2), torch.cat([p.layers[i][1] for p in parts], -2))
                        for i in range(len(parts[0].layers))))

    def crop(self, keep: int) -> KV:
        return KV(tuple((k[:, :, :keep], v[:, :, :keep]) for k, v in self.layers))


EMPTY_KV = KV(())


StopAt = Callable[[Sequence[int]], "int | None"]
"""Token ids → the fewest leading ones completing a stop string (None: none), ``OverText.stop_length``."""


@dataclass
class SlotState:
    """Committed answer tokens by position, their KV (prompt first, then generation order)."""

    prompt: list[int]
    kv: KV = EMPTY_KV
    answer: dict[int, int] = field(default_factory=dict)  # answer position → token
    order: list[int] = field(default_factory=list)  # answer positions in commit (= KV) order
    eos_pos: int | None = None  # the answer's last position: its first EOS, or the token completing a stop string
    stopped: bool = False  # eos_pos is where a stop string completes (:meth:`end_at_stop`)

    def commit(self, positions: Sequence[int], tokens: Sequence[int], kv: KV, eos_ids: frozenset[int]) -> None:
        self.kv = self.kv.cat(kv)
        for p, t in zip(positions, tokens, strict=True):
            self.answer[p] = int(t)
            self.order.append(p)
            if t in eos_ids and (self.eos_pos is None or p < self.eos_pos):
                self.eos_pos = p

    def accept(self, tokens: Sequence[int], eos_ids: frozenset[int]) -> None:
        """Commit a stream step's accepted leading run (its KV is already in ``kv``)."""
        for p, t in enumerate(tokens):
            self.answer[p] = int(t)
            self.order.append(p)
            if t in eos_ids and self.eos_pos is None:
                self.eos_pos = p

    def end_at_stop(self, stop: StopAt) -> None:
        """End the answer after the token completing its first stop string, found in the leading run of
        committed positions (later positions may still change what precedes them there: none does)."""
        run: list[int] = []
        while len(run) in self.answer and (self.eos_pos is None or len(run) <= self.eos_pos):
            run.append(self.answer[len(run)])
        k = stop(run)
        if k is not None and (self.eos_pos is None or k - 1 < self.eos_pos):
            self.eos_pos, self.stopped = k - 1, True

    def tokens(self, gen_length: int) -> list[int]:
        """The answer in positional order, through the first EOS (inclusive)."""
        end = gen_length if self.eos_pos is None else self.eos_pos + 1
        return [self.answer[p] for p in range(end)]


@dataclass(frozen=True)
class _Chosen:
    slots: list[list[int]]  # chosen slots (answer positions), in position order
    drafts: list[list[int]]  # plan argmax per chosen slot


class SlotEngine:
    """The ReFusion round loop over a :class:`SlotState`; every model call is one metered forward."""

    def __init__(self, model: Any, settings: SlotSettings, mask_id: int, eos_ids: frozenset[int],
                 meter: ForwardMeter, device: torch.device, *, block_length: int) -> None:
        self.model, self.s, self.mask_id, self.eos_ids = model, settings, mask_id, eos_ids
        self.meter, self.device, self.block_length = meter, device, block_length

    # -- model call ----------------------------------------------------------------------------

    def forward(self, state: SlotState, rows: list[list[int]], positions: list[list[int]],
                kind: str) -> tuple[torch.Tensor, Any, int]:
        """ONE forward of ``rows`` (answer positions) on top of the committed KV (batch = rows).

        Request tokens not yet in the KV are fed first (the prefill rides along with the first call);
        returns (logits, cache, number of request tokens fed ahead of the rows).
        """
        p, c = len(state.prompt), min(state.kv.length, len(state.prompt))
        head, head_pos = state.prompt[c:], list(range(c, p))
        ids = [head + r for r in rows]
        pos = [head_pos + [p + q for q in qs] for qs in positions]
        cache = state.kv.to_cache(len(rows))
        input_ids = torch.tensor(ids, dtype=torch.long, device=self.device)
        position_ids = torch.tensor(pos, dtype=torch.long, device=self.device)
        with self.meter.call(kind, input_ids.numel()):
            out = self.model(input_ids=input_ids, position_ids=position_ids, cache=cache, use_cache=True)
        if head:  # the request's KV is exact (it comes first): keep it, whatever follows
            state.kv = KV.from_cache(cache, 0, p)
        return out.logits.float(), cache, len(head)

    # -- the round -----------------------------------------------------------------------------

    def plan(self, state: SlotState, slots: list[list[int]]) -> _Chosen:
        flat = [q for s in slots for q in s]
        logits, _, head = self.forward(state, [[self.mask_id] * len(flat)], [flat], "plan")
        logits = logits[:, head:]  # the masks' KV is dropped: only the request's is kept
        if self.s.suppress_mask_logit:
            logits[..., self.mask_id] = float("-inf")
        probs = logits[0].softmax(-1)
        conf, x0 = probs.max(-1)
        starts = [0]
        for s in slots[:-1]:
            starts.append(starts[-1] + len(s))
        slot_conf, x0_host = to_host(conf[starts], x0)  # one transfer for the forward, not one per element
        best = [int(t) for t in x0_host]
        chosen = [j for j, c in enumerate(slot_conf) if c > self.s.slot_threshold]
        if not chosen:
            chosen = [max(range(len(slots)), key=lambda j: slot_conf[j])]
        return _Chosen([slots[j] for j in chosen], [best[starts[j]:starts[j] + len(slots[j])] for j in chosen])

    def _eos_cut(self, tokens: Sequence[int]) -> int | None:
        return next((i for i, t in enumerate(tokens) if t in self.eos_ids), None)

    def verify_and_commit(self, state: SlotState, ch: _Chosen) -> list[int] | None:
        """Global AR verification of the chosen drafts; commits covered slots, else returns per-slot
        verified lengths for the infill."""
        flat = [t for d in ch.drafts for t in d]
        pos = [q for s in ch.slots for q in s]
        logits, cache, _ = self.forward(state, [flat], [pos], "verify")
        prev = [1.0, *next_token_probs(logits[0], flat)]  # prev[j]: token j's probability (j ≥ 1)
        slot_first, i = set(), 0
        for s in ch.slots:
            slot_first.add(i)
            i += len(s)
        ok = [j in slot_first or prev[j] > self.s.token_threshold for j in range(len(flat))]
        accepted = next((j for j, v in enumerate(ok) if not v), len(flat))
        eos = self._eos_cut(flat[:accepted])
        covered, end = 0, 0
        for s in ch.slots:
            if end + len(s) > accepted:
                break
            covered, end = covered + 1, end + len(s)
        if eos is not None:
            end = eos + 1
        elif covered == 0:
            return self._per_slot_verified(ok, ch)
        base = state.kv.length
        state.commit(pos[:end], flat[:end], KV.from_cache(cache, base, base + end), self.eos_ids)
        return None

    @staticmethod
    def _per_slot_verified(ok: list[bool], ch: _Chosen) -> list[int]:
        out, i = [], 0
        for s in ch.slots:
            run = ok[i:i + len(s)]
            out.append(next((j for j, v in enumerate(run) if not v), len(run)))
            i += len(s)
        return out

    def infill(self, state: SlotState, ch: _Chosen, verified: list[int]) -> None:
        """Parallel in-slot infill: prediction + verification forwards until every slot is verified."""
        rows = [list(d) for d in ch.drafts]
        width = max(len(s) for s in ch.slots)
        pad = lambda r: r + [self.mask_id] * (width - len(r))  # noqa: E731  (right padding: causally inert)
        positions = [s + [s[-1] + 1 + j for j in range(width - len(s))] for s in ch.slots]
        live = list(range(len(rows)))  # slots still in play (an EOS drops the slots after it)
        while True:
            if any(verified[j] < len(rows[j]) for j in live):
                inp = [pad([t if q < verified[j] else self.mask_id for q, t in enumerate(rows[j])]) for j in live]
                logits, _, _ = self.forward(state, inp, [positions[j] for j in live], "infill_predict")
                if self.s.suppress_mask_logit:
                    logits[..., self.mask_id] = float("-inf")
                best = logits.argmax(-1).tolist()
                for b, j in enumerate(live):
                    rows[j][verified[j]:] = best[b][verified[j]:len(rows[j])]
            logits, cache, _ = self.forward(state, [pad(rows[j]) for j in live], [positions[j] for j in live],
                                            "infill_verify")
            probs = next_token_probs_rows(logits, [rows[j] for j in live])  # one transfer for all rows
            for b, j in enumerate(live):
                p = probs[b]  # p[v - 1]: token v's probability
                v = min(verified[j] + 1, len(rows[j]))  # the token after the verified run always passes
                while v < len(rows[j]) and p[v - 1] > self.s.token_threshold:
                    v += 1
                verified[j] = max(v, 1)
            live = self._drop_after_eos(live, rows, verified)
            if all(verified[j] >= len(rows[j]) for j in live):
                break
        self._commit_infill(state, ch, rows, live, cache)

    def _drop_after_eos(self, live: list[int], rows: list[list[int]], verified: list[int]) -> list[int]:
        for b, j in enumerate(live):
            cut = self._eos_cut(rows[j][:verified[j]])
            if cut is not None:
                rows[j] = rows[j][:cut + 1]
                verified[j] = len(rows[j])
                return live[:b + 1]
        return live

    def _commit_infill(self, state: SlotState, ch: _Chosen, rows: list[list[int]], live: list[int], cache: Any) -> None:
        base = state.kv.length
        for b, j in enumerate(live):  # KV of each row was computed without the other chosen slots
            n = len(rows[j])
            state.commit(ch.slots[j][:n], rows[j], KV.from_cache(cache, base, base + n, row=b), self.eos_ids)

    def round(self, state: SlotState, slots: list[list[int]]) -> None:
        ch = self.plan(state, slots)
        verified = self.verify_and_commit(state, ch)
        if verified is not None:
            self.infill(state, ch, verified)

    def confirm(self, state: SlotState, end: int) -> None:
        """The round that emits a fully accepted draft: plan + verify over the slot after its end
        (the buffer's padding, where ReFusion's loop would commit again); nothing is committed, the
        answer stays the draft. Its 2 forwards make the floor 3 (docs/diffusion.md)."""
        ch = self.plan(state, [list(range(end, end + self.s.slot_size))])
        self.forward(state, [ch.drafts[0]], [ch.slots[0]], "verify")

    def decode(self, state: SlotState, gen_length: int, stop: StopAt | None = None) -> None:
        """Fill every uncommitted position, block by block, until EOS or ``gen_length``; with ``stop``, a
        stop string completed in the leading committed run ends the answer as an EOS would (checked
        before every round)."""
        block = min(self.block_length, gen_length)
        for start in range(0, gen_length, block):
            while True:
                if stop is not None:
                    state.end_at_stop(stop)
                limit = min(start + block, gen_length if state.eos_pos is None else state.eos_pos)
                free = [p for p in range(start, limit) if p not in state.answer]
                if not free:
                    break
                self.round(state, _slots(free, self.s.slot_size))
            if state.eos_pos is not None:
                return


def next_token_probs(logits: torch.Tensor, tokens: Sequence[int]) -> list[float]:
    """``out[i]``: the probability row ``i`` of ``logits`` gives ``tokens[i + 1]`` (softmax over the
    vocabulary), for every i at once: one gather and one conversion instead of one per token."""
    return next_token_probs_rows(logits[None], [tokens])[0]


def next_token_probs_rows(logits: torch.Tensor, rows: Sequence[Sequence[int]]) -> list[list[float]]:
    """:func:`next_token_probs` of batch row ``b`` of ``logits`` and ``rows[b]``, for every b, moved to
    the host in ONE transfer (not one per batch row)."""
    picked = []
    for b, tokens in enumerate(rows):
        idx = torch.tensor(list(tokens[1:]), dtype=torch.long, device=logits.device)
        picked.append(logits[b, : max(len(tokens) - 1, 0)].softmax(-1).gather(-1, idx[:, None])[:, 0])
    return to_host(*picked)


def _slots(free: list[int], k: int) -> list[list[int]]:
    """Split uncommitted positions into slots of ``k`` consecutive positions (runs never merge)."""
    out: list[list[int]] = []
    for p in free:
        if out and p == out[-1][-1] + 1 and len(out[-1]) < k:
            out[-1].append(p)
        else:
            out.append([p])
    return out
