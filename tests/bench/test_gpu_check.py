"""bench/gpu_check.py runs the same code on CPU as on CUDA: its divergence table on the near-tie scripted
model (streamgen/models/scripted_tie.py), part 3 skipped with ``verify_model=`` as documented. Expected counts
come from the design: a request whose complete rendering has an even byte length ties at the branch token.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
N = 4


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _expected_ties() -> int:
    sys.path.insert(0, str(REPO / "bench"))
    from gpu_check import REQUESTS

    from streamgen.models.tokenizers import tiny_tokenizer
    from streamgen.requests.segment import segment

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
    speed = [p for line in out.splitlines() if (p := line.split()) and p[0] == "scripted-ar-neartie" and len(p) > 9]
    assert len(speed) == 1 and speed[0][5] == str(N)  # the medians are over the N timed pairs
    assert " ".join(speed[0][7:10]) == "warm-up: 1 pair," and speed[0][-2:] == ["not", "counted"]


def test_gpu_check_on_cpu_near_tie_and_part_3_skipped() -> None:
    _check(_run("device=cpu", "models=[scripted-ar-neartie]", "dtypes=[float32]", f"requests={N}",
                "tie_guards=[1]", "verify_model="))


@pytest.mark.gpu
def test_gpu_check_on_cuda() -> None:
    _check(_run("device=cuda", "models=[scripted-ar-neartie]", "dtypes=[float32]", f"requests={N}",
                "tie_guards=[1]", "verify_model="))


def test_the_warm_up_pair_runs_first_and_stays_out_of_the_medians(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: the warm-up pair is run (on the same decoder, before the timed pairs) and none of its
    numbers reaches the rows or the speedup lists the medians are taken over."""
    sys.path.insert(0, str(REPO / "bench"))
    import gpu_check

    from streamgen.warmup import WARMUP_REQUEST

    order: list[str] = []
    real_run_pair = gpu_check.run_pair

    def recording(decoder, request, rule, **kw):
        order.append(request.example_id)
        return real_run_pair(decoder, request, rule, **kw)

    monkeypatch.setattr(gpu_check, "run_pair", recording)
    monkeypatch.setattr("streamgen.warmup.run_pair", recording)
    cfg = gpu_check.CheckConfig(device="cpu", models=["scripted-ar-neartie"], dtypes=["float32"], requests=N,
                                verify_model=None)
    run = gpu_check.check_model("scripted-ar-neartie", "float32", cfg)
    assert order == [WARMUP_REQUEST.example_id] + [f"r{i}" for i in range(N)]  # warm-up first, once
    assert run.warmup is not None and run.warmup.pairs == 1 and run.warmup.forwards > 0
    assert len(run.speedup_forwards) == len(run.speedup_wall) == len(run.rows) == N  # timed pairs only
    assert WARMUP_REQUEST.example_id not in {r.example_id for r in run.rows}

    order.clear()
    cold = gpu_check.check_model("scripted-ar-neartie", "float32", dataclasses.replace(cfg, warm_up=False))
    assert cold.warmup is None and order == [f"r{i}" for i in range(N)]
    assert [r.base_forwards for r in cold.rows] == [r.base_forwards for r in run.rows]  # counts unchanged
