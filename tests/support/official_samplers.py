"""Deliberately simple reimplementations of the official samplers, for the decoders to be compared with.

Written from reading ML-GSAI/LLaDA ``generate.py``, the Dream-v0 hub folder's ``generation_utils.py``
(``DreamGenerationMixin._sample``) and ML-GSAI/ReFusion ``generate.py`` (no code copied): batch 1, the
sequence as a plain list, every model call a full forward over everything before it (no KV cache), greedy
(temperature 0). Each knob is a keyword argument named as the official code names it. Each function
returns the answer (every generated position, as the official ``x[:, prompt_len:]``) and the number of
model calls. Slow and obvious on purpose; the decoders under test are the clever ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

NEG = float("-inf")


@dataclass
class Trace:
    """What a reference run did: model calls, and ReFusion's infill rounds by number of chosen slots."""

    calls: int = 0
    infill_rows: list[int] = field(default_factory=list)


def _full_logits(model, x: list[int], trace: Trace) -> torch.Tensor:
    trace.calls += 1
    with torch.no_grad():
        return model(torch.tensor([x])).logits[0].float()


def _top(confidence: list[float], k: int) -> list[int]:
    """The k largest finite confidences' indices (ties: lower index), as torch.topk over -inf padding."""
    finite = [i for i, c in enumerate(confidence) if c != NEG]
    return sorted(finite, key=lambda i: (-confidence[i], i))[:k]


def llada_generate(model, prompt: list[int], *, steps: int, gen_length: int, block_length: int, mask_id: int,
                   logits_eos_inf: tuple[int, ...] = (), confidence_eos_eot_inf: tuple[int, ...] = ()
                   ) -> tuple[list[int], Trace]:
    """LLaDA ``generate`` (cfg_scale 0, low_confidence). ``logits_eos_inf`` / ``confidence_eos_eot_inf``:
    the ids the official flags set to -inf (126081 / 126081 and 126348 on LLaDA-8B)."""
    assert gen_length % block_length == 0
    blocks = gen_length // block_length
    assert steps % blocks == 0
    per_block, trace = steps // blocks, Trace()
    x, p = list(prompt) + [mask_id] * gen_length, len(prompt)
    for b in range(blocks):
        end = p + (b + 1) * block_length
        m = x[end - block_length:end].count(mask_id)
        counts = [m // per_block + (1 if i < m % per_block else 0) for i in range(per_block)]
        for k in counts:
            logits = _full_logits(model, x, trace)
            logits[:, list(logits_eos_inf)] = NEG
            x0 = logits.argmax(-1).tolist()
            logits[:, list(confidence_eos_eot_inf)] = NEG
            prob = logits.softmax(-1)
            conf = [float(prob[i, x0[i]]) if x[i] == mask_id and i < end else NEG for i in range(len(x))]
            for i in _top(conf, k):
                x[i] = x0[i]
    return x[p:], trace


def _filtered(row: torch.Tensor, top_p: float | None, top_k: int | None) -> torch.Tensor:
    """Dream's sample_tokens filters: nucleus (the token crossing top_p stays), then the k largest."""
    row = row.clone()
    if top_p is not None and top_p < 1:
        values, order = row.sort(descending=True)
        cum = values.softmax(-1).cumsum(-1)
        before = torch.cat([torch.zeros(1), cum[:-1]])  # the mass of the tokens ranked above
        row[order[before > top_p]] = torch.finfo(row.dtype).min
    if top_k is not None:
        kth = sorted(row.tolist(), reverse=True)[min(top_k, row.numel()) - 1]
        row[row < kth] = torch.finfo(row.dtype).min
    return row


def dream_generate(model, prompt: list[int], *, steps: int, max_new_tokens: int, mask_id: int, alg: str,
                   eps: float = 1e-3, top_p: float | None = None, top_k: int | None = 50) -> tuple[list[int], Trace]:
    """Dream ``diffusion_generate`` → ``_sample`` at temperature 0 (``top_k=50``: what it inherits from
    transformers' config defaults when the caller passes none)."""
    trace = Trace()
    x, p = list(prompt) + [mask_id] * max_new_tokens, len(prompt)
    timesteps = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        masked = [j for j, t in enumerate(x) if t == mask_id]
        raw = _full_logits(model, x, trace)
        logits = torch.cat([raw[:1], raw[:-1]])
        conf, x0 = {}, {}
        for j in masked:
            probs = _filtered(logits[j], top_p, top_k).softmax(-1)
            x0[j] = int(probs.argmax())
            if alg == "entropy":
                conf[j] = float((probs * torch.log(probs + 1e-10)).sum())
            elif alg == "topk_margin":
                first, second = probs.topk(2).values.tolist()
                conf[j] = first - second
            else:  # maskgit_plus
                conf[j] = float(probs.max())
        t, s = timesteps[i], timesteps[i + 1]
        k = int((torch.tensor(len(masked)) / 1) * (1 - s / t)) if i < steps - 1 else len(masked)
        for j in _top([conf.get(j, NEG) for j in range(len(x))], k):
            x[j] = x0[j]
    return x[p:], trace


def _causal(model, context: list[tuple[int, int]], rows: list[list[tuple[int, int]]], trace: Trace) -> torch.Tensor:
    """ONE model call: the batch of ``context + row`` sequences of (token, position); the rows' logits."""
    trace.calls += 1
    ids = torch.tensor([[t for t, _ in context + r] for r in rows])
    pos = torch.tensor([[q for _, q in context + r] for r in rows])
    with torch.no_grad():
        return model(input_ids=ids, position_ids=pos).logits[:, len(context):].float()


def refusion_generate(model, prompt: list[int], *, gen_length: int, slot_size: int, serial_num_blocks: int,
                      slot_threshold: float, token_threshold: float, mask_id: int, eos_token_id: int | frozenset[int]
                      ) -> tuple[list[int], Trace]:
    """ReFusion ``generate_refusion`` (temperature 0). Exact where at most one slot is infilled at a time
    (``Trace.infill_rows``): several infilled rows keep KV computed without each other, which a no-cache
    reference cannot reproduce. An EOS found during infill drops the slots after the EOS's slot (the
    official code counts from the row's index among the chosen slots instead: a bug the project does not
    copy). ``eos_token_id``: one id as the official code takes, or a set (a test's extra EOS)."""
    eos_ids = eos_token_id if isinstance(eos_token_id, frozenset) else frozenset({eos_token_id})
    trace, p = Trace(), len(prompt)
    gen = gen_length + (-gen_length) % slot_size
    block = gen // serial_num_blocks
    context = [(t, i) for i, t in enumerate(prompt)]  # prompt, then committed tokens in commit order
    answer: dict[int, int] = {}
    ended = False

    def commit(tokens: list[int], positions: list[int]) -> None:
        for t, q in zip(tokens, positions, strict=True):
            context.append((t, p + q))
            answer[q] = t

    for b in range(serial_num_blocks):
        slots = [list(range(b * block + i * slot_size, b * block + (i + 1) * slot_size))
                 for i in range(block // slot_size)]
        while slots:
            flat = [q for s in slots for q in s]
            plan = _causal(model, context, [[(mask_id, p + q) for q in flat]], trace)[0]
            prob = plan.softmax(-1)
            x0 = plan.argmax(-1).tolist()
            first = [float(prob[i * slot_size, x0[i * slot_size]]) for i in range(len(slots))]
            chosen = [i for i, c in enumerate(first) if c > slot_threshold] or [first.index(max(first))]
            drafts = [x0[i * slot_size:(i + 1) * slot_size] for i in chosen]
            toks, poss = [t for d in drafts for t in d], [q for i in chosen for q in slots[i]]
            ver = _causal(model, context, [list(zip(toks, [p + q for q in poss], strict=True))], trace)[0]
            ok = [j % slot_size == 0 or float(ver[j - 1].softmax(-1)[toks[j]]) > token_threshold
                  for j in range(len(toks))]
            prefix = ok.index(False) if False in ok else len(ok)
            eos = next((j for j in range(prefix) if toks[j] in eos_ids), None)
            if eos is not None:
                covered = eos // slot_size + 1
                commit(toks[:eos + 1], poss[:eos + 1])
                last = chosen[covered - 1]
                slots = [s for i, s in enumerate(slots) if i < last and i not in chosen[:covered]]
                ended = True
                continue
            if prefix >= slot_size:
                covered = prefix // slot_size
                commit(toks[:covered * slot_size], poss[:covered * slot_size])
                slots = [s for i, s in enumerate(slots) if i not in chosen[:covered]]
                continue
            rows = [list(d) for d in drafts]
            tags = [[all(ok[r * slot_size:r * slot_size + j + 1]) for j in range(slot_size)] for r in range(len(rows))]
            trace.infill_rows.append(len(rows))
            eos_row = None
            for _ in range(slot_size):
                if all(all(t) for t in tags):
                    break
                masked = [[(t if tags[r][j] else mask_id, p + slots[chosen[r]][j]) for j, t in enumerate(row)]
                          for r, row in enumerate(rows)]
                pred = _causal(model, context, masked, trace).argmax(-1).tolist()
                rows = [[t if tags[r][j] else pred[r][j] for j, t in enumerate(row)] for r, row in enumerate(rows)]
                seqs = [[(t, p + slots[chosen[r]][j]) for j, t in enumerate(row)] for r, row in enumerate(rows)]
                logits = _causal(model, context, seqs, trace)
                for r, row in enumerate(rows):
                    passes = [j == 0 or tags[r][j - 1] or float(logits[r, j - 1].softmax(-1)[row[j]]) > token_threshold
                              for j in range(len(row))]
                    tags[r] = [all(passes[:j + 1]) for j in range(len(row))]
                hit = next((r for r, row in enumerate(rows)
                            if any(t in eos_ids and tags[r][j] for j, t in enumerate(row))), None)
                if hit is not None:
                    rows, tags, chosen, eos_row = rows[:hit + 1], tags[:hit + 1], chosen[:hit + 1], hit
                    tags[hit] = [True] * len(tags[hit])
            flat_rows = [t for row in rows for t in row]
            flat_pos = [q for r in range(len(rows)) for q in slots[chosen[r]]]
            cut = next((j + 1 for j, t in enumerate(flat_rows) if t in eos_ids), len(flat_rows))
            commit(flat_rows[:cut], flat_pos[:cut])
            if eos_row is not None:
                last = chosen[eos_row]
                slots = [s for i, s in enumerate(slots) if i < last and i not in chosen]
                ended = True
            else:
                slots = [s for i, s in enumerate(slots) if i not in chosen]
        if ended:
            break
    return [answer[q] for q in sorted(answer)], trace


def _parity_table() -> None:
    """``python -m tests.support.official_samplers``: every setting test_official_procedures.py compares, with the
    project's and the reference's tokens and forwards side by side (the figures of issue 26's note)."""
    from streamgen.config import model_config
    from streamgen.families.registry import load_decoder
    from tests.streamgen.families import test_official_procedures as t

    def row(family: str, setting: str, d, want: list[int], trace: Trace, early: bool) -> None:
        got = d.generate(t.ADDS)
        same = list(got.token_ids) == t._cut(want, d.eos_ids)
        print(f"| {family} | {setting} | {'yes' if early else 'no'} | {len(got.token_ids)} | {got.forwards} | "
              f"{trace.calls} | {'equal' if same else 'DIFFER'} |")

    print("| family | setting | early EOS | answer tokens | forwards (project) | forwards (official) | tokens |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for gen, block, steps in t.LLADA_SETTINGS:
        for early in (False, True):
            over = [f"decoding.gen_length={gen}", f"decoding.block_length={block}", f"decoding.steps={steps}"]
            d = load_decoder(model_config("tiny-llada", over), max_new_tokens=32)
            if early:
                over.append(f"decoding.eos_token_ids=[{t._early_eos(d, t.ADDS)}]")
                d = load_decoder(model_config("tiny-llada", over), max_new_tokens=32)
            want, trace = llada_generate(d.model, d.text.render(t.ADDS), steps=steps, gen_length=gen,
                                         block_length=block, mask_id=d.mask_id)
            row("LLaDA", f"gen {gen}, block {block}, steps {steps}", d, want, trace, early)
    for steps in (32, 16, 10, 7):
        for alg, top_k in (("entropy", 50), ("maskgit_plus", 0)):
            d = load_decoder(model_config("tiny-dream", [f"decoding.steps={steps}", f"decoding.remasking={alg}",
                                                         f"decoding.top_k={top_k}"]), max_new_tokens=32)
            want, trace = dream_generate(d.model, d.text.render(t.ADDS), steps=steps, max_new_tokens=32,
                                         mask_id=d.mask_id, alg=alg, top_k=top_k or None)
            row("Dream", f"gen 32, steps {steps}, {alg}, top-k {top_k or 'none'}", d, want, trace, False)
    for setting in t.REFUSION_SETTINGS:
        gen, slot, blocks, slot_t, tok_t = setting
        for early in (False, True):
            d = t._refusion(*setting)
            if early:
                d = t._refusion(*setting, f"decoding.eos_token_ids=[{t._early_eos(d, t.ADDS)}]")
            want, trace = refusion_generate(d.model, d.text.render(t.ADDS), gen_length=gen, slot_size=slot,
                                            serial_num_blocks=blocks, slot_threshold=slot_t, token_threshold=tok_t,
                                            mask_id=d.mask_id, eos_token_id=d.eos_ids)
            row("ReFusion", f"gen {gen}, slot {slot}, {blocks} blocks, τ {slot_t}/{tok_t}", d, want, trace, early)


if __name__ == "__main__":
    _parity_table()
