"""Peak host memory while loading weights, before (the old code paths) and after (straight to the device).

    python bench/bench_load_memory.py                 # SmolLM2 fp32 + bf16, a LLaDA-style checkpoint both ways
    python bench/bench_load_memory.py --device cuda   # on a GPU: the host side of a load onto the device

Each load runs in a fresh subprocess (nothing cached between them) and reports:

- ``peak RSS``: ``resource.getrusage(RUSAGE_SELF).ru_maxrss``, the process's peak resident set, file-backed
  pages of the mapped safetensors included;
- ``peak anon``: the peak of ``RssAnon`` (``/proc/self/status``), sampled every 2 ms by a thread: memory no
  other process can share and the kernel cannot drop, what eight actors loading at once add up;

both minus the process's RSS after its imports, so the numbers are the load's own. ``before`` is the old
code, kept here verbatim: ``AutoModelForCausalLM.from_pretrained(path, dtype=...).to(device)`` for
transformers folders, and ``load_file`` of every shard + ``load_state_dict(assign=True)`` +
``.to(device, dtype)`` for the in-project BidirLM. ``after`` is :func:`streamgen.models.weights.load_model_and_tokenizer`
and :func:`streamgen.families.bidirectional.checkpoint.load_bidir_checkpoint` as they are now.

SmolLM2 is measured from its converted safetensors folder: the one-off GGUF conversion runs first, in this
parent process, and is not measured. The bidirectional model is a random LLaDA-layout checkpoint (hidden
1024, 8 layers, vocabulary 32000: 166 M parameters) in four shards, written once in bf16 and once in fp32,
each loaded in the other dtype so the dtype conversion matters.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BIDIR_CONFIG = {"d_model": 1024, "n_layers": 8, "n_heads": 16, "n_kv_heads": 16, "mlp_hidden_size": 2816,
                "vocab_size": 32000, "embedding_size": 32000, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
                "max_sequence_length": 4096, "block_type": "llama", "include_bias": False,
                "mask_token_id": 31999, "eos_token_id": 31998}
# (label, model, checkpoint dtype, load dtype)
CASES = (("smollm2 fp32 folder → fp32", "smollm2", "float32", "float32"),
         ("smollm2 fp32 folder → bf16", "smollm2", "float32", "bfloat16"),
         ("llada-like 166M bf16 ckpt → fp32", "bidir", "bfloat16", "float32"),
         ("llada-like 166M fp32 ckpt → bf16", "bidir", "float32", "bfloat16"))
MB = 1 << 20


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class AnonPeak:
    """Samples ``RssAnon`` every 2 ms on a thread until stopped; ``peak_kb`` is the largest seen."""

    def __init__(self) -> None:
        self.peak_kb, self._stop = _status_kb("RssAnon"), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak_kb = max(self.peak_kb, _status_kb("RssAnon"))

    def __enter__(self) -> AnonPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kb = max(self.peak_kb, _status_kb("RssAnon"))


# ---- the old code, verbatim in substance ----------------------------------------------------


def old_transformers_load(folder: str, dtype: str, device: str) -> object:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from streamgen.models.weights import torch_dtype

    AutoTokenizer.from_pretrained(folder)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(dtype)).to(device).eval()


def old_bidir_load(folder: str, dtype: str, device: str) -> object:
    import torch
    from safetensors.torch import load_file

    from streamgen.families.bidirectional.model import BidirLM, load_mapped_state_dict, spec_from_config
    from streamgen.models.weights import torch_dtype

    spec = spec_from_config("llada", json.loads((Path(folder) / "config.json").read_text()))
    with torch.device("meta"):
        model = BidirLM(spec)
    state: dict[str, torch.Tensor] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        state.update(load_file(str(f)))
    load_mapped_state_dict(model, state, assign=True)
    model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config)
    return model.to(device=device, dtype=torch_dtype(dtype)).eval()


# ---- the new code ---------------------------------------------------------------------------


def new_transformers_load(folder: str, dtype: str, device: str) -> object:
    from streamgen.config import ModelConfig
    from streamgen.models.weights import load_model_and_tokenizer

    cfg = ModelConfig(name="bench", family="autoregressive", source="local", path=folder, dtype=dtype)
    return load_model_and_tokenizer(cfg, device).model


def new_bidir_load(folder: str, dtype: str, device: str) -> object:
    from streamgen.families.bidirectional.checkpoint import load_bidir_checkpoint
    from streamgen.models.weights import torch_dtype

    return load_bidir_checkpoint("llada", folder, dtype=torch_dtype(dtype), device=device)


LOADERS = {("smollm2", "before"): old_transformers_load, ("smollm2", "after"): new_transformers_load,
           ("bidir", "before"): old_bidir_load, ("bidir", "after"): new_bidir_load}


def child(kind: str, way: str, folder: str, dtype: str, device: str) -> None:
    import torch  # noqa: F401  (imports are not the load's memory)
    import transformers  # noqa: F401

    import streamgen.families.bidirectional.model  # noqa: F401
    import streamgen.models.weights  # noqa: F401

    base_kb = _status_kb("VmRSS")
    start = time.perf_counter()
    with AnonPeak() as anon:
        model = LOADERS[kind, way](folder, dtype, device)
    wall = time.perf_counter() - start
    params = sum(p.numel() * p.element_size() for p in model.parameters())  # type: ignore[attr-defined]
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_rss_mb": (peak_kb - base_kb) / 1024, "peak_anon_mb": (anon.peak_kb - base_kb) / 1024,
                      "model_mb": params / MB, "wall_s": wall}))


# ---- the parent -----------------------------------------------------------------------------


def write_bidir_checkpoint(folder: Path, dtype: str) -> None:
    import torch
    from safetensors.torch import save_file

    from streamgen.families.bidirectional.model import BidirLM, spec_from_config
    from streamgen.models.weights import torch_dtype

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(BIDIR_CONFIG))
    with torch.device("meta"):
        names = {k: tuple(v.shape) for k, v in BidirLM(spec_from_config("llada", BIDIR_CONFIG)).state_dict().items()}
    inverse = _llada_names(names)
    gen = torch.Generator().manual_seed(0)
    ordered = sorted(inverse)
    for i in range(4):
        part = {inverse[k]: (torch.randn(names[k], generator=gen) * 0.02).to(torch_dtype(dtype))
                for k in ordered[i::4]}
        save_file(part, str(folder / f"model-{i + 1:05d}-of-00004.safetensors"))


def _llada_names(names: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """In-project name → the LLaDA checkpoint name that maps onto it (map_parameter_name, inverted)."""
    from streamgen.families.bidirectional.model import _LLADA_BLOCK, _LLADA_TOP

    top = {v: k for k, v in _LLADA_TOP.items()}
    block = {v: k for k, v in _LLADA_BLOCK.items()}
    out = {}
    for name in names:
        if name in top:
            out[name] = top[name]
        else:
            _, _, i, rest = name.split(".", 3)
            module, leaf = rest.rsplit(".", 1)
            out[name] = f"model.transformer.blocks.{i}.{block[module]}.{leaf}"
    return out


def measure(kind: str, way: str, folder: str, dtype: str, device: str) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", kind, way, folder, dtype, "--device", device]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "WAY", "FOLDER", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.device)
        return
    from streamgen.models.weights import converted_gguf_folder, smollm2_gguf_path

    smollm2 = str(converted_gguf_folder(smollm2_gguf_path()))  # the one-off conversion: not measured
    with tempfile.TemporaryDirectory() as tmp:
        folders = {("smollm2", "float32"): smollm2}
        for dtype in ("bfloat16", "float32"):
            write_bidir_checkpoint(Path(tmp) / dtype, dtype)
            folders["bidir", dtype] = str(Path(tmp) / dtype)
        print(f"device {args.device}; MB = MiB over the process's RSS after imports; one fresh process per load")
        print(f"{'case':34} {'model':>7} | {'peak RSS before→after':>22} | {'peak anon before→after':>23} | "
              f"{'wall s':>11}")
        for label, kind, ckpt, dtype in CASES:
            before = measure(kind, "before", folders[kind, ckpt], dtype, args.device)
            after = measure(kind, "after", folders[kind, ckpt], dtype, args.device)
            print(f"{label:34} {after['model_mb']:7.0f} | {before['peak_rss_mb']:9.0f} → {after['peak_rss_mb']:9.0f}"
                  f" | {before['peak_anon_mb']:10.0f} → {after['peak_anon_mb']:9.0f} | "
                  f"{before['wall_s']:4.1f} → {after['wall_s']:4.1f}", flush=True)


if __name__ == "__main__":
    main()
