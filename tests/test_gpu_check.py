"""bench/gpu_check.py runs the same code on CPU as on CUDA: its divergence table on the near-tie scripted
model (streamgen/scripted_tie.py), part 3 skipped with ``verify_model=`` as documented. Expected counts
come from the design: a request whose complete rendering has an even byte length ties at the branch token.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
N = 4


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _expected_ties() -> int:
    sys.path.insert(0, str(REPO / "bench"))
    from gpu_check import REQUESTS

    from streamgen.segment import segment
    from streamgen.tokenizers import tiny_tokenizer

    tok = tiny_tokenizer()
    texts = ["".join(segment(t)) for t in REQUESTS[:N]]
    rendered = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                        add_generation_prompt=True) for t in texts]
    return sum(len(r.encode()) % 2 == 0 for r in rendered)


def _rows(out: str) -> dict[str, list[str]]:
    return {f"{p[1]} {p[2]}": p for line in out.splitlines()
            if (p := line.split()) and p[0] == "scripted-ar-neartie" and len(p) == 9}


def _check(out: str) -> None:
    ties, rows = _expected_ties(), _rows(out)
    assert 0 < ties < N  # both kinds of request are among the first N
    greedy, guarded = rows["float32 greedy"], rows["float32 guard=1"]
    assert greedy[3] == f"{N - ties}/{N}" and greedy[4] == str(ties) and greedy[5] == "0"  # all at a near tie
    assert greedy[6] == "1.0"  # the designed margin: one float32 spacing
    assert guarded[3] == f"{N}/{N}" and guarded[4] == "0"  # the guard removes every difference
    assert "verify 64 tokens" not in out  # part 3 skipped


def test_gpu_check_on_cpu_near_tie_and_part_3_skipped() -> None:
    _check(_run("device=cpu", "models=[scripted-ar-neartie]", "dtypes=[float32]", f"requests={N}",
                "tie_guards=[1]", "verify_model="))


@pytest.mark.gpu
def test_gpu_check_on_cuda() -> None:
    _check(_run("device=cuda", "models=[scripted-ar-neartie]", "dtypes=[float32]", f"requests={N}",
                "tie_guards=[1]", "verify_model="))
