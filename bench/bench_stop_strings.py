"""What looking for stop strings costs (docs/accounting.md, "Stop strings"): SmolLM2's tokenizer, an
lm-eval task's ``until``, answers of several lengths.

    python bench/bench_stop_strings.py                  # lengths 64, 256, 512; arith_local's until
    python bench/bench_stop_strings.py "lengths=[64]"

Per length L it times, side by side in one run: the autoregressive check after every decoded token
(``StopStrings.ends`` on the answer so far, L calls: what a base decode of L tokens pays), and one
search of a whole answer (``stop_length``, the bisection the diffusion families run per block or round).
Both run inside the timed spans of a decode; compare the per-token figure with a forward's wall time.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamgen.config import load  # noqa: E402
from streamgen.decoding.stops import StopStrings, stop_length  # noqa: E402

TEXT = "Tom has 3 apples and buys 4 more, so he has 7 apples. The answer is 7. "


@dataclass(frozen=True)
class BenchConfig:
    lengths: list[int] = field(default_factory=lambda: [64, 256, 512])
    until: list[str] = field(default_factory=lambda: ["Question:", "</s>", "<|im_end|>"])  # arith_local's
    searches: int = 200


def main(argv: list[str]) -> None:
    from transformers import AutoTokenizer

    from streamgen.models.weights import smollm2_gguf_path

    cfg = load(BenchConfig, overrides=argv)
    path = smollm2_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ids = tok(TEXT * (1 + max(cfg.lengths) // 8), add_special_tokens=False)["input_ids"]

    def decode(tokens: object) -> str:
        return str(tok.decode(list(tokens), skip_special_tokens=True))  # type: ignore[call-overload]

    stops = StopStrings(cfg.until, decode)
    print(f"SmolLM2 tokenizer, until {cfg.until}, an answer holding none of them")
    for n in cfg.lengths:
        answer = ids[:n]
        start = time.perf_counter()
        for k in range(1, n + 1):
            stops.ends(answer[:k])
        every = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(cfg.searches):
            stop_length(answer, stops.strings, decode)
        search = (time.perf_counter() - start) / cfg.searches
        print(f"  answer {n:4d} tokens: check after every token {every * 1e3:7.1f} ms in all "
              f"({every / n * 1e6:5.0f} us/token); one whole-answer search {search * 1e6:5.0f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
