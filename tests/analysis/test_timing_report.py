"""The typing table and the K-users simulation, on constructed results with waits computed by hand.

Every recorded wall time obeys 0.5 s per forward + 0.01 s per token fed (tests/streamgen/timing/test_typing_policies.py's law),
so the fitted cost model is that law and modelled figures are exact too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.csv as pacsv
import pytest

from analysis import simulate
from analysis.report import write_report
from analysis.simulate import Script, simulate_once
from analysis.typing_table import build_typing
from streamgen.config import TypingConfig
from streamgen.results.records import StepRecord
from streamgen.timing.policies import StepFacts
from tests.streamgen.timing.test_typing_policies import COST, _example
from tests.support.analysis_fixtures import RecordSet, pair_record, write_record_set

STEPS = _example(10.0)  # forwards, tokens fed, draft in, accepted, generated of 4 steps (the law's walls)


def _steps(pair, chars, only=None, timing=None):  # type: ignore[no-untyped-def]
    out = []
    for i, (s, c) in enumerate(zip(STEPS, chars, strict=True), start=1):
        if only and i not in only:
            continue
        arrival, start = timing[i] if timing else (None, None)
        out.append(StepRecord(pair.run_id, pair.shard_id, pair.cell_id, pair.model, pair.benchmark, pair.acceptance,
                              pair.tau, pair.example_id, i, i == len(chars), c, s.draft_tokens_in, s.accepted_tokens,
                              s.generated_tokens, s.forwards, s.tokens_fed, s.wall_s, s.wall_s, None, 2, "t",
                              pasted_chars=0, sentence_ends=0, arrival_s=arrival, start_s=start))
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("typing")
    e0 = pair_record(example_id="e0", n_segments=4, base_wall_s=COST.cost(4, 100), base_forwards=4,
                     base_tokens_fed=100)  # 3.0 s
    e1 = pair_record(example_id="e1", n_segments=4, base_wall_s=COST.cost(6, 200), base_forwards=6,
                     base_tokens_fed=200)  # 5.0 s
    live = pair_record(example_id="e0", cell_id="live", n_segments=4, live_policy="latest", live_chars_per_s=10.0,
                       base_wall_s=COST.cost(4, 100), base_forwards=4, base_tokens_fed=100)
    steps = [*_steps(e0, (10, 20, 30, 40)), *_steps(e1, (30, 60, 90, 120)),
             *_steps(live, (10, 20, 30, 40), only={1, 4}, timing={1: (1.0, 1.0), 4: (4.0, 4.2)})]
    write_record_set(root, RecordSet([e0, e1, live], steps))
    return root


def test_typing_table_by_hand(results: Path) -> None:
    typing = build_typing(results, TypingConfig(chars_per_s=[10.0], policies=["every", "latest"]), threads=1)
    fit = typing.cost_models.to_pylist()[0]
    assert fit["a_s_per_forward"] == pytest.approx(0.5) and fit["b_s_per_token"] == pytest.approx(0.01)
    rows = {(r["source"], r["policy"]): r for r in typing.summary.to_pylist()}
    # e0 arrives at 1, 2, 3, 4 (tests/streamgen/timing/test_typing_policies.py: every-segment wait 2.71, not keeping up);
    # e1 at 3, 6, 9, 12: each step ends before the next arrival, so it waits the final step alone
    w0 = (max(4, max(3, max(2, 1 + 2.23) + 1.66) + 0.65) + 1.17) - 4
    w1 = 1.17
    every = rows[("post_hoc", "every")]
    assert every["n"] == 2 and every["median_wait_s"] == pytest.approx((w0 + w1) / 2)
    assert every["p90_wait_s"] == pytest.approx(w1 + 0.9 * (w0 - w1))
    assert every["keeps_up_share"] == 0.5 and every["median_base_wait_s"] == pytest.approx((3.0 + 5.0) / 2)
    assert every["modelled_share"] == 0
    assert rows[("post_hoc", "latest")]["modelled_share"] == 0.5  # e0 skips step 2; e1 keeps up
    live = rows[("live", "latest")]  # ran steps 1 and 4; the final started 0.2 s after its arrival
    assert live["n"] == 1 and live["median_wait_s"] == pytest.approx(4.2 + 1.17 - 4.0)
    assert live["median_backlog_s"] == pytest.approx(0.2) and live["keeps_up_share"] == 0
    assert live["mean_skipped"] == 2  # steps 2 and 3 never ran


def test_report_writes_the_typing_table_and_figure(results: Path, tmp_path: Path) -> None:
    report = write_report(results, out_dir=tmp_path, threads=1)
    text = report.markdown_path.read_text()
    assert "## Typing: wait after the last keystroke" in text and "Cost model" in text
    assert pacsv.read_csv(tmp_path / "typing.csv").num_rows == 3 * 4 + 1  # rates × policies + live
    assert any(p.name.startswith("typing-wait-") for p in report.figure_paths)


# ------------------------------------------------------------------------------------------
# K users on one replica
# ------------------------------------------------------------------------------------------

# two steps: a 2-forward draft (50 tokens fed: 1.5 s) and a final that accepts it (1 forward, 20 tokens: 0.7 s)
SCRIPT = Script((StepFacts(1.0, COST.cost(2, 50), 2, 50, 0, 0, 2), StepFacts(2.0, COST.cost(1, 20), 1, 20, 2, 2, 1)),
                base_wall_s=2.0)


def test_simulation_always_draft_by_hand() -> None:
    out = simulate_once([SCRIPT, SCRIPT], [0.0, 0.6], "always", COST)
    # u0 drafts [1, 2.5]; u1's draft (queued at 1.6) goes first-come first-served before u0's final
    # (submitted at 2): [2.5, 4]; then u0's final [4, 4.7], u1's final (submitted 2.6) [4.7, 5.4]
    assert out.waits == pytest.approx((4.7 - 2.0, 5.4 - 2.6))
    assert out.utilisation == pytest.approx((1.5 + 1.5 + 0.7 + 0.7) / (5.4 - 1.0)) and out.modelled_jobs == 0


def test_simulation_sees_an_arrival_at_the_instant_the_device_frees() -> None:
    out = simulate_once([SCRIPT, SCRIPT], [0.0, 0.5], "always", COST)
    # u0's draft ends at 2.5 exactly when u1 submits: the submit is seen before the device chooses, so
    # u1's queued draft (stale: its final has arrived) never runs; u0's final (submitted 2) [2.5, 3.2],
    # then u1's final with no draft, as in the test below
    u1_final = COST.cost(1 + 2, 20 + 49 + (0 - 2) + 2)
    assert out.waits == pytest.approx((3.2 - 2.0, 3.2 + u1_final - 2.5))
    assert out.jobs == 3 and out.modelled_jobs == 1


@pytest.mark.parametrize("policy", ["submitted_first", "idle_only"])
def test_simulation_submitted_requests_first_by_hand(policy: str) -> None:
    out = simulate_once([SCRIPT, SCRIPT], [0.0, 0.5], policy, COST)
    # u0's final goes before u1's draft [2.5, 3.2] (idle_only never queued that draft: the device was busy
    # at 1.5); u1 submits at 2.5 with no draft: its final regenerates 2 + 1 tokens and its verify feeds
    # step 1's 49 request tokens too (modelled)
    u1_final = COST.cost(1 + 2, 20 + 49 + (0 - 2) + 2)
    assert out.waits == pytest.approx((3.2 - 2.0, 3.2 + u1_final - 2.5))
    assert out.modelled_jobs == 1 and out.jobs == 3


def test_idle_only_drops_a_draft_the_busy_device_cannot_take() -> None:
    # u1 types its first segment at 1.5 (u0's draft is running) and submits only at 10
    late = Script((StepFacts(1.5, COST.cost(2, 50), 2, 50, 0, 0, 2), StepFacts(10.0, COST.cost(1, 20), 1, 20, 2, 2, 1)),
                  base_wall_s=2.0)
    queued = simulate_once([SCRIPT, late], [0.0, 0.0], "submitted_first", COST)
    dropped = simulate_once([SCRIPT, late], [0.0, 0.0], "idle_only", COST)
    # submitted_first: u0's final [2.5, 3.2], then u1's queued draft [3.2, 4.7]: its final verifies it
    assert queued.waits == pytest.approx((3.2 - 2.0, 0.7)) and queued.jobs == 4 and queued.modelled_jobs == 0
    # idle_only: the draft was dropped at 1.5, so u1's final has no draft (as in the test above)
    assert dropped.waits == pytest.approx((3.2 - 2.0, COST.cost(1 + 2, 20 + 49 + (0 - 2) + 2)))
    assert dropped.jobs == 3 and dropped.modelled_jobs == 1


def test_simulation_submit_then_decode_by_hand() -> None:
    out = simulate_once([SCRIPT, SCRIPT], [0.0, 0.5], "submit_then_decode")
    assert out.waits == pytest.approx((2.0, (2.0 + 2.0 + 2.0) - 2.5))  # u1 queues behind u0's base run
    assert out.utilisation == pytest.approx(4.0 / (6.0 - 1.0))


def test_sweep_is_seeded_and_cli_writes_its_table(results: Path, tmp_path: Path) -> None:
    rows = simulate.sweep([SCRIPT], [1, 3], COST, reps=3, seed=5)
    assert rows == simulate.sweep([SCRIPT], [1, 3], COST, reps=3, seed=5)
    assert {(r.users, r.policy) for r in rows} == {(k, p) for k in (1, 3) for p in simulate.SIM_POLICIES}
    one = [r for r in rows if r.users == 1 and r.policy == "always"][0]
    assert one.p50_wait_s == pytest.approx(1 + 1.5 + 0.7 - 2)  # alone: the final waits for the draft
    assert simulate.main([str(results), "--users", "1,2", "--reps", "2", "--out", str(tmp_path)]) == 0
    table = pacsv.read_csv(tmp_path / "simulation.csv")
    assert table.num_rows == 2 * len(simulate.SIM_POLICIES)
    assert (tmp_path / "simulation-p95-wait.png").stat().st_size > 0


def test_report_cli_takes_typing_settings(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from analysis.report import main

    assert main([str(results), "--out", str(tmp_path), "--no-figures", "--typing", "chars_per_s=[0]"]) == 2
    assert "positive finite rates" in capsys.readouterr().err
    assert main([str(results), "--out", str(tmp_path), "--no-figures", "--typing", "chars_per_s=[5]",
                 "policies=[every]"]) == 0
    rows = pacsv.read_csv(tmp_path / "typing.csv").to_pylist()
    assert {(r["rate"], r["policy"]) for r in rows if r["source"] == "post_hoc"} == {(5.0, "every")}


def test_simulation_draws_each_script_from_a_user_of_the_population(results: Path) -> None:
    from streamgen.timing.timeline import PrefixCounts
    from streamgen.timing.typists import population

    pop = population("mobile", 3, seed=4)
    inputs = simulate.simulation_inputs(results, None, population=pop)
    assert "mobile typists (3 users, seed 4)" in inputs.label
    by_rate = simulate.simulation_inputs(results, 10.0)
    assert len(by_rate.scripts) == 2 and len(inputs.scripts) == 2 * 3  # e0, e1 (the live cell is not replayed)
    for e, (example_id, chars) in enumerate((("e0", (10, 20, 30, 40)), ("e1", (30, 60, 90, 120)))):
        # the fixture's steps: no paste, no sentence or paragraph ends; the key is the example id
        expected = pop.arrivals([PrefixCounts(c, 0, 0, 0) for c in chars], example_id)
        for user in range(3):
            script = inputs.scripts[3 * e + user]
            assert [f.arrival_s for f in script.steps] == pytest.approx(expected[user], rel=1e-12)
            # everything but the arrival is the recorded step, as at a fixed rate
            assert ([dataclasses.replace(f, arrival_s=0.0) for f in script.steps]
                    == [dataclasses.replace(f, arrival_s=0.0) for f in by_rate.scripts[e].steps])
            assert script.base_wall_s == by_rate.scripts[e].base_wall_s
    assert len({s.steps[-1].arrival_s for s in inputs.scripts}) == 6  # every user types at their own speed


def test_simulation_cli_names_the_population(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = [str(results), "--users", "1,2", "--reps", "2", "--out", str(tmp_path)]
    assert simulate.main([*args, "--population", "desktop", "--population-users", "5"]) == 0
    assert "desktop typists (5 users, seed 0), 10 scripts" in (tmp_path / "simulation.md").read_text()
    with pytest.raises(SystemExit) as exc:
        simulate.main([*args, "--population", "desktop", "--rate", "5"])
    assert exc.value.code == 2 and "drop --rate" in capsys.readouterr().err
