"""RoPE precision of every study diffusion model in bf16 at long positions, before and after issue 37.

    python bench/bench_rope_precision.py                 # before and after, every config, ~1 min on 2 cores
    python bench/bench_rope_precision.py --mode before   # only today's-before behaviour (inv_freq cast to bf16)
    python bench/bench_rope_precision.py --lengths 613 853

For each study diffusion config in configs/models/ (llada-8b, dream-7b, refusion-8b), a scaled-down
model with the real checkpoint's head dimension, rope θ and attention layout (width, depth and
vocabulary shrunk; facts below, from each checkpoint's public config.json) is built the way the
project loads that config, run in bf16 over a request of N tokens + 64 answer positions, and its
answer logits compared with tests/support/rope_reference.py's independent forward (float32 rotary tables,
the rotation where the official code puts it) in bf16: argmax agreement of 64 and max |logit diff|.
Next to it, the reference's own bf16-vs-fp32 gap: the noise any bf16 run carries. No timing.

``before`` reproduces the code before issue 37: ``model.to(bf16)`` rounded the ``inv_freq`` buffers,
and LLaDA rotated q and k in bf16. ``after`` is today's code. ReFusion loads through transformers'
``from_pretrained`` (which keeps ``inv_freq`` in float32) and only moves the model to its device, so
its two rows are the same path. DiffusionGemma is not built here: see docs/diffusion.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from streamgen.config import ModelConfig, model_config  # noqa: E402
from streamgen.families.bidirectional.checkpoint import load_bidir_checkpoint  # noqa: E402
from streamgen.families.bidirectional.model import BidirLM, BidirSpec, map_parameter_name, tiny_bidir_model  # noqa: E402
from streamgen.models.rope import is_rope_buffer  # noqa: E402
from streamgen.models.weights import torch_dtype  # noqa: E402
from tests.support.rope_reference import Agreement, RefShape, agreement, reference_logits  # noqa: E402

ANSWER = 64
VOCAB = 96


@dataclass(frozen=True)
class Facts:
    """What of a real checkpoint the scaled-down model keeps (its config.json), and how it rotates."""

    config: str
    head_dim: int
    rope_theta: float
    heads: int  # scaled down; the kv-head ratio keeps GQA where the real model has it
    kv_heads: int
    rotate_fp32: bool  # where the official code rotates (docs/diffusion.md, "RoPE precision")
    source: str


STUDY = (
    Facts("llada-8b", 128, 500000.0, 2, 2, True,
          "GSAI-ML/LLaDA-8B-Instruct config.json: d_model 4096 / n_heads 32, rope_theta 500000, "
          "rope_full_precision true, no GQA"),
    Facts("dream-7b", 128, 1000000.0, 2, 1, False,
          "Dream-org/Dream-v0-Instruct-7B config.json: hidden 3584 / 28 heads, 4 kv heads, rope_theta 1e6"),
    Facts("refusion-8b", 128, 1000000.0, 2, 1, False,
          "GSAI-ML/ReFusion (Qwen3-8B): head_dim 128, 32 heads / 8 kv heads, rope_theta 1e6, q/k norm"),
)


_LLADA_BLOCK_NAMES = ("attn_norm", "ff_norm", "q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj",
                      "ff_out")  # the LLaDA-8B checkpoint's per-block weight names (OLMo layout)


def _checkpoint_names(arch: str, hf_names: list[str], n_layers: int) -> dict[str, str]:
    """HF name → the name the real checkpoint stores it under (Dream: the same; LLaDA: OLMo names)."""
    if arch == "dream":
        return {n: n for n in hf_names}
    top = ["model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight"]
    blocks = [f"model.transformer.blocks.{i}.{b}.weight" for i in range(n_layers) for b in _LLADA_BLOCK_NAMES]
    return {map_parameter_name("llada", name): name for name in top + blocks}


def _config_json(arch: str, facts: Facts, spec: BidirSpec) -> dict[str, object]:
    if arch == "llada":  # OLMo keys, as LLaDA-8B-Instruct's config.json
        return {"d_model": spec.hidden_size, "n_heads": spec.num_heads, "n_kv_heads": spec.num_kv_heads,
                "n_layers": spec.num_layers, "mlp_hidden_size": spec.intermediate_size, "vocab_size": VOCAB,
                "rope_theta": facts.rope_theta, "rope_full_precision": True, "block_type": "llama",
                "max_sequence_length": 4096, "mask_token_id": VOCAB - 1, "eos_token_id": VOCAB - 2}
    return {"vocab_size": VOCAB, "hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_heads,
            "num_key_value_heads": spec.num_kv_heads, "rope_theta": facts.rope_theta,
            "max_position_embeddings": 4096, "mask_token_id": VOCAB - 1, "eos_token_id": VOCAB - 2}


def _bidir(facts: Facts, arch: str, mode: str, folder: Path,
           dtype: torch.dtype) -> tuple[BidirLM, RefShape, dict[str, torch.Tensor]]:
    """A scaled-down checkpoint folder in the real layout, loaded as the config loads it (load_bidir_checkpoint)."""
    from safetensors.torch import save_file

    fp32 = tiny_bidir_model(arch, seed=0, vocab_size=VOCAB, hidden_size=facts.heads * facts.head_dim,  # type: ignore[arg-type]
                            intermediate_size=256, num_heads=facts.heads, num_kv_heads=facts.kv_heads,
                            rope_theta=facts.rope_theta, max_position_embeddings=4096)
    state = {k: v.clone() for k, v in fp32.state_dict().items() if not is_rope_buffer(k)}
    folder.mkdir(parents=True)
    names = _checkpoint_names(arch, list(state), fp32.spec.num_layers)
    save_file({names[k]: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(_config_json(arch, facts, fp32.spec)))
    model = load_bidir_checkpoint(arch, folder, dtype=dtype)  # type: ignore[arg-type]
    if mode == "before":  # what model.to(bf16) and the bf16 rotation did before issue 37
        rot = model.model.rotary_emb
        for name in ("inv_freq", "original_inv_freq"):
            setattr(rot, name, getattr(rot, name).to(dtype))
        model.spec = replace(model.spec, rope_full_precision=False)
    s = model.spec
    shape = RefShape(s.num_layers, s.num_heads, s.num_kv_heads, facts.head_dim, facts.rope_theta,
                     s.rms_norm_eps, rotate_fp32=facts.rotate_fp32)
    return model, shape, state


def _refusion(facts: Facts, folder: Path, dtype: str) -> tuple[torch.nn.Module, RefShape, dict[str, torch.Tensor]]:
    """A scaled-down Qwen3 saved as a checkpoint folder, loaded as configs/models/refusion-8b.yaml loads."""
    from streamgen.models.tokenizers import tiny_tokenizer
    from streamgen.models.weights import load_model_and_tokenizer, tiny_model

    fp32 = tiny_model("qwen3", seed=0, vocab_size=VOCAB, hidden_size=facts.heads * facts.head_dim,
                      head_dim=facts.head_dim, num_attention_heads=facts.heads, num_key_value_heads=facts.kv_heads,
                      intermediate_size=256, rope_parameters={"rope_type": "default", "rope_theta": facts.rope_theta},
                      max_position_embeddings=4096, tie_word_embeddings=False)
    fp32.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    state = {k: v.clone() for k, v in fp32.state_dict().items()}
    model = load_model_and_tokenizer(ModelConfig(name=facts.config, source="local", path=str(folder),
                                                 dtype=dtype)).model
    c = fp32.config
    shape = RefShape(c.num_hidden_layers, facts.heads, facts.kv_heads, facts.head_dim, facts.rope_theta,
                     c.rms_norm_eps, rotate_fp32=False, causal=True, qk_norm=True)
    return model, shape, state


@dataclass(frozen=True)
class Row:
    config: str
    mode: str
    request_tokens: int
    inv_freq_dtype: str
    noise: Agreement
    got: Agreement


def measure(facts: Facts, mode: str, request_tokens: int, tmp: Path) -> Row:
    study = model_config(facts.config)  # dtype and family from the YAML
    folder = tmp / f"{facts.config}-{mode}-{request_tokens}"
    if study.family == "refusion":
        model, shape, state = _refusion(facts, folder, study.dtype)
    else:
        arch = str(dict(study.decoding)["style"])
        model, shape, state = _bidir(facts, arch, mode, folder, torch_dtype(study.dtype))
    ids = torch.randint(0, VOCAB - 2, (1, request_tokens + ANSWER), generator=torch.Generator().manual_seed(1))
    answer = slice(request_tokens, request_tokens + ANSWER)
    ref32 = reference_logits(state, ids, shape, torch.float32)[:, answer]
    ref16 = reference_logits(state, ids, shape, torch.bfloat16)[:, answer]
    with torch.no_grad():
        ours = model(ids).logits.float()[:, answer]
    dtypes = sorted({str(b.dtype).removeprefix("torch.") for n, b in model.named_buffers() if is_rope_buffer(n)})
    return Row(facts.config, mode, request_tokens, "/".join(dtypes), agreement(ref16, ref32), agreement(ours, ref16))


def render(rows: list[Row]) -> str:
    head = ("| config | code | request tokens | inv_freq | vs bf16 reference: argmax agree / 64 | max abs diff "
            "| reference bf16 vs fp32 (noise): agree / 64 | max abs diff |")
    lines = [head, "|" + " --- |" * 8]
    for r in rows:
        lines.append(f"| {r.config} | {r.mode} | {r.request_tokens} | {r.inv_freq_dtype} | {r.got.argmax_equal} "
                     f"| {r.got.max_abs_diff:.3g} | {r.noise.argmax_equal} | {r.noise.max_abs_diff:.3g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["before", "after", "both"], default="both")
    parser.add_argument("--lengths", type=int, nargs="+", default=[613, 1024, 2048],
                        help="request tokens before the 64 answer positions")
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # save / load bars of the ReFusion folder, not the table
    modes = ["before", "after"] if args.mode == "both" else [args.mode]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for facts in STUDY:
            for mode in modes:
                rows += [measure(facts, mode, n, Path(tmp)) for n in args.lengths]
    print(render(rows))
    print()
    for facts in STUDY:
        print(f"{facts.config}: {facts.source}")


if __name__ == "__main__":
    main()
