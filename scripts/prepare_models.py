"""Convert the offline GGUF models once into the model cache, as a first run would, so that later
processes (model actors, test workers) only load the converted folders.

    python scripts/prepare_models.py                 # SmolLM2-135M-Instruct and, when installed, Gemma-3-270M
    STREAMGEN_CACHE=/path python scripts/prepare_models.py

``.ci/run`` starts it in the background while the rest installs, and waits for it before the tests: the
conversions (about 30 s and 90 s on 2 cores) then overlap the downloads instead of a test's time. Any
process that asks for a folder while this converts waits on the cache's file lock
(``streamgen.models.weights.converted_gguf_folder``). Exit 1 with one line per model that could not be
prepared; a model whose package is not installed is skipped with a line saying so.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not another install

from streamgen.models.weights import (  # noqa: E402
    ModelLoadError,
    converted_gguf_folder,
    gemma3_270m_gguf_path,
    smollm2_gguf_path,
)

MODELS = {"smollm2": smollm2_gguf_path, "gemma3-270m": gemma3_270m_gguf_path}


def main() -> int:
    failed = 0
    for name, locate in MODELS.items():
        t0 = time.monotonic()
        try:
            folder = converted_gguf_folder(locate())
        except ModelLoadError as exc:
            print(f"prepare_models: {name}: {exc}", file=sys.stderr)
            failed += name == "smollm2"  # the default model must be there; Gemma is an optional extra
            continue
        print(f"prepare_models: {name} ready in {folder} ({time.monotonic() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
