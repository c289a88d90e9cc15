"""How long the checkpoint pre-flight takes on the six study checkpoints at their real layout (issue 52).

Each study model's published ``config.json`` unscaled (tests/support/fixtures/checkpoints: its real hidden size,
layer count and vocabulary), its real number of shards with every weight name and shape in their headers
(the data a sparse hole: the pre-flight reads headers only), its tokenizer_config.json, and a
``tokenizer.json`` with one vocabulary entry and one merge per token id (a file of the published ones'
order of size: 5-13 MB here; the pre-flight parses it whole for its added tokens). Times
``jobs.grid.checkpoint_preflight.preflight`` over the six, in this process: the first call (transformers' model classes
imported on the way) and the best of the next ``--repeat``.

    python bench/bench_preflight.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.checkpoint_cache import STUDY_MODELS, fixture, weight_shapes, write_snapshot  # noqa: E402


def tokenizer_json(fx: dict, vocab_size: int) -> dict:
    added = [{"id": int(i), "content": t["content"]} for i, t in fx["tokenizer"]["added_tokens_decoder"].items()]
    return {"added_tokens": added, "model": {"type": "BPE", "vocab": {f"\u0120tok{i:06d}": i for i in range(vocab_size)},
                                             "merges": [f"\u0120t ok{i:06d}" for i in range(vocab_size)]}}


def build(cache: Path) -> dict[str, int]:
    """The six checkpoints at their real sizes in ``cache``; the bytes of each tokenizer.json."""
    sizes = {}
    for model in STUDY_MODELS:
        fx = fixture(model)
        config = copy.deepcopy(fx["config"])
        if "text_config_key" in fx:  # Gemma-3's published text_config leaves head_dim to its default
            from transformers import Gemma3TextConfig

            config[fx["text_config_key"]].setdefault("head_dim", Gemma3TextConfig().head_dim)
        folder = write_snapshot(cache, model, config=config, shapes=weight_shapes(fx, config))
        text = config.get(fx.get("text_config_key", ""), config)
        vocab = int(text.get("vocab_size") or config.get("vocab_size") or fx["defaults"]["vocab_size"])
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(fx, vocab)))
        sizes[model] = (folder / "tokenizer.json").stat().st_size
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="warm calls after the first (best one shown)")
    repeat = parser.parse_args(argv).repeat
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HF_HUB_CACHE"] = tmp
        sizes = build(Path(tmp))
        from jobs.grid.checkpoint_preflight import preflight
        from streamgen.config import model_config

        models = {m: model_config(m) for m in STUDY_MODELS}
        start = time.perf_counter()
        problems = preflight(models).problems
        first = time.perf_counter() - start
        assert problems == [], problems
        warm = []
        for _ in range(repeat):
            start = time.perf_counter()
            preflight(models)
            warm.append(time.perf_counter() - start)
        per_model = {}
        for m in STUDY_MODELS:
            start = time.perf_counter()
            preflight({m: models[m]})
            per_model[m] = time.perf_counter() - start
    print(f"tokenizer.json sizes (MB): {', '.join(f'{m} {b / 1e6:.1f}' for m, b in sizes.items())}")
    print(f"pre-flight of the six: first call {first:.2f} s, then best of {repeat} {min(warm):.2f} s")
    print("per model (warm): " + ", ".join(f"{m} {s:.2f} s" for m, s in per_model.items()))


if __name__ == "__main__":
    main()
