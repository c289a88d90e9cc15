"""The typist population, keystroke-log replay, and waits over a population (docs/typists.md).

Expected figures come from formulas written here: the log-normal's moments and their standard errors,
a fixed-rate typist's arrivals (typed characters / rate + pauses), and a three-line `every`-policy
schedule with a hand-written percentile.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from analysis.population import build_population
from streamgen.config import REPO_ROOT, ConfigError, TypingConfig, raise_if_problems, validate_typing
from streamgen.requests.segment import segment
from streamgen.timing.granularity import make_segmenter
from streamgen.timing.keylog import KeyLog, keylog_line, read_keylog, replay_arrivals
from streamgen.timing.timeline import TypingModel, arrival_times, prefix_counts
from streamgen.timing.typists import PRESETS, Population, Preset, chars_per_s, population
from tests.analysis.test_timing_report import COST, _steps
from tests.support.analysis_fixtures import RecordSet, pair_record, write_record_set

# ------------------------------------------------------------------------------------------
# the population
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["desktop", "mobile"])
def test_sampled_speeds_reproduce_the_presets_mean_and_sd(name: str) -> None:
    preset, n = PRESETS[name], 40_000  # large enough that 4 SE of the SD (0.4 WPM) separates σ = cv from the fit
    wpm = population(name, n, seed=3).speeds_wpm()
    m, s = preset.mean_wpm, preset.sd_wpm
    # log-normal with coefficient of variation c: excess kurtosis e^{4σ²} + 2e^{3σ²} + 3e^{2σ²} − 6, σ² = ln(1 + c²)
    s2 = math.log1p((s / m) ** 2)
    kurt = math.exp(4 * s2) + 2 * math.exp(3 * s2) + 3 * math.exp(2 * s2) - 6 + 3
    se_mean = s / math.sqrt(n)
    se_sd = s * math.sqrt((kurt - 1) / n) / 2  # delta method on the sample variance
    assert abs(wpm.mean() - m) < 4 * se_mean
    assert abs(wpm.std(ddof=1) - s) < 4 * se_sd
    assert wpm.min() > 0  # a log-normal: no typist types at a negative or zero speed
    # the median of a moment-matched log-normal is mean / sqrt(1 + c²), below the mean (right skew)
    assert np.median(wpm) < m and abs(np.median(wpm) - m / math.sqrt(1 + (s / m) ** 2)) < 4 * 1.2533 * se_mean


def test_seeded_draws_reproduce_and_do_not_depend_on_the_population_size() -> None:
    counts = prefix_counts(segment("One two three. Four five six seven.\n\nEight nine."))
    a = population("desktop", 50, seed=7).arrivals(counts, "bench/1")
    assert np.array_equal(a, population("desktop", 50, seed=7).arrivals(counts, "bench/1"))
    assert not np.array_equal(a, population("desktop", 50, seed=8).arrivals(counts, "bench/1"))
    assert not np.array_equal(a, population("desktop", 50, seed=7).arrivals(counts, "bench/2"))
    # user u is the same typist in a population of 50 and of 20, on the same request
    assert np.array_equal(a[:20], population("desktop", 20, seed=7).arrivals(counts, "bench/1"))
    assert np.array_equal(population("desktop", 50, seed=7).speeds_wpm()[:20],
                          population("desktop", 20, seed=7).speeds_wpm())
    assert np.all(np.diff(a, axis=1) >= 0)  # a prefix never arrives before a shorter one


def _fixed(sentence_pause_s: float = 0.0, paragraph_pause_s: float = 0.0) -> Preset:
    """Every user types at their own constant rate; pauses of exactly the given length."""
    return Preset("fixed", mean_wpm=52.0, sd_wpm=20.0, iki_cv=0.0, sentence_pause_s=sentence_pause_s,
                  paragraph_pause_s=paragraph_pause_s, pause_cv=0.0)


def test_pauses_land_at_sentence_and_paragraph_boundaries() -> None:
    # word segments: the pause after a sentence end comes after the word that ends it
    text = "Aa bb. Cc dd.\n\nEe ff. Gg"
    words = make_segmenter("word")(text)
    assert words == ["Aa ", "bb. ", "Cc ", "dd.\n\n", "Ee ", "ff. ", "Gg"]
    S, P = 1.25, 4.0
    pop = Population(_fixed(S, P), users=5, seed=1)
    arrivals = pop.arrivals(prefix_counts(words), "designed")
    rates = chars_per_s(pop.speeds_wpm())
    ends = np.cumsum([len(w) for w in words])
    pauses = arrivals - ends[None, :] / rates[:, None]
    # boundaries strictly inside each prefix: after "bb. " (sentence), after "dd.\n\n" (sentence + paragraph),
    # after "ff. " (sentence)
    expected = [0, 0, S, S, 2 * S + P, 2 * S + P, 3 * S + P]
    assert np.allclose(pauses, np.array(expected)[None, :], atol=1e-9)
    assert sum(1 for i in range(1, 7) if expected[i] > expected[i - 1]) == 3  # three pauses, at three boundaries


def test_a_constant_typist_is_the_fixed_rate_timeline() -> None:
    segs = ["One two.\n", "```\nx=1\n```\n", "Three. Four."]  # the code block is pasted
    pop = Population(_fixed(0.5), users=3, seed=2)
    for u, rate in enumerate(chars_per_s(pop.speeds_wpm())):
        fixed = arrival_times(segs, TypingModel(float(rate), sentence_pause_s=0.5))
        assert np.allclose(pop.arrivals(prefix_counts(segs), "r")[u], fixed, rtol=1e-12)


def test_bad_population_settings_are_one_config_error_naming_the_fix() -> None:
    cfg = TypingConfig(populations=["desktop", "tablet"], users=0, seed=-1, live_policy="every", chars_per_s=[10])
    with pytest.raises(ConfigError) as err:
        raise_if_problems(validate_typing(cfg, live=True))
    text = str(err.value)
    assert "'tablet'" in text and "typing.users=0" in text and "typing.seed=-1" in text
    assert "unset typing.live_policy" in text and "4 problems" in text
    with pytest.raises(ConfigError, match="use one of"):
        population("tablet", 10)


def test_the_typists_grid_validates() -> None:
    from streamgen.config import grid_config, validate_grid

    grid = grid_config("typists")
    assert grid.typing.populations == ["desktop", "mobile"] and grid.typing.live_policy is None
    assert validate_grid(grid) == []


# ------------------------------------------------------------------------------------------
# keystroke-log replay
# ------------------------------------------------------------------------------------------


def _typed_by_hand(text: str, rate: float, pause: float) -> KeyLog:
    """The fixed-rate typist keystroke by keystroke: a clock that moves 1/rate per typed character and
    ``pause`` after each sentence end; a code block appears whole with no time of its own."""
    blocks = {a: b for a, b in ((m.start(), m.end()) for m in _fences(text))}
    cuts = set(np.cumsum([len(s) for s in segment(text)])[:-1].tolist())
    t, pos, times, texts = 0.0, 0, [], []
    while pos < len(text):
        if pos in cuts:
            t += pause
        if pos in blocks:
            pos = blocks[pos]
        else:
            t += 1 / rate
            pos += 1
        times.append(t)
        texts.append(text[:pos])
    return KeyLog("hand/1", tuple(times), tuple(texts))


def _fences(text: str):  # type: ignore[no-untyped-def]
    import re

    return re.finditer(r"```\n.*?```\n", text, re.S)


def test_a_replayed_log_equals_the_timeline_typed_by_the_model(tmp_path: Path) -> None:
    text = "Fix this. It is broken.\n\nHere:\n```\nx = 1\n```\nThen more. End"
    segs = segment(text)
    assert len(segs) >= 5 and any(s.startswith("```") for s in segs)  # sentences, a paragraph, a pasted block
    rate, pause = 8.0, 0.5  # dyadic: every time below is exact in binary floating point
    log = _typed_by_hand(text, rate, pause)
    path = tmp_path / "log.jsonl"
    path.write_text(keylog_line(log) + "\n")
    replayed = replay_arrivals(read_keylog(path)["hand/1"], segs)
    assert replayed == arrival_times(segs, TypingModel(rate, sentence_pause_s=pause))  # exactly


def test_the_example_log_replays_and_a_typo_is_in_only_when_corrected() -> None:
    logs = read_keylog(REPO_ROOT / "data" / "keylogs" / "example.jsonl")
    assert sorted(logs) == ["keylog-example/1", "keylog-example/2"]
    log = logs["keylog-example/1"]
    typo = [i for i, x in enumerate(log.texts) if not log.final_text.startswith(x)]
    assert len(typo) == 1  # the file holds one uncorrected state
    segs = segment(log.final_text)
    arrivals = replay_arrivals(log, segs)
    end1 = len(segs[0])
    first_full = next(i for i, x in enumerate(log.texts) if len(x) >= end1)
    assert typo[0] < first_full and arrivals[0] == log.times_s[first_full]
    assert arrivals[-1] == log.times_s[-1]


def test_a_segment_arrives_when_it_is_in_for_good() -> None:
    # "Hi. " is in at 0 s, gone at 2 s (deleted back to "Hi"), in again from 3 s on
    log = KeyLog("d/1", (0.0, 1.0, 2.0, 3.0, 4.0), ("Hi. ", "Hi. X", "Hi", "Hi. ", "Hi. Yo"))
    assert replay_arrivals(log, ["Hi. ", "Yo"]) == (3.0, 4.0)


def test_a_log_of_another_request_is_one_clear_error(tmp_path: Path) -> None:
    log = KeyLog("x/1", (0.0, 0.5), ("H", "Hello there."))
    with pytest.raises(ConfigError, match=r"not its request: they differ from character 6 .*pair the log"):
        replay_arrivals(log, ["Hello ", "world."])
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"example_id": "x/1", "states": [[1.0, "a"], [0.5, "ab"]]}) + "\n")
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: state 1 at 0.5 s comes before .*sort the states"):
        read_keylog(path)
    path.write_text('{"example_id": "x/1"}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: KeyError .*each line must be"):
        read_keylog(path)


# ------------------------------------------------------------------------------------------
# waits over a population
# ------------------------------------------------------------------------------------------


def _every_wait(arrivals: list[float], walls: list[float]) -> tuple[float, bool]:
    """The every-segment schedule, written out: each step starts at max(arrival, previous end)."""
    end, keeps = 0.0, True
    for i, (t, w) in enumerate(zip(arrivals, walls, strict=True)):
        end = max(t, end) + w
        keeps &= i == len(arrivals) - 1 or end <= arrivals[i + 1]
    return end - arrivals[-1], keeps


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    h = q * (len(xs) - 1)
    lo = int(h)
    return xs[lo] + (h - lo) * (xs[min(lo + 1, len(xs) - 1)] - xs[lo])


def test_population_waits_against_a_simple_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PRESETS, "desktop", _fixed())  # users at their own constant rate, no pauses
    e0 = pair_record(example_id="e0", n_segments=4, base_wall_s=COST.cost(4, 100), base_forwards=4,
                     base_tokens_fed=100)  # 3.0 s
    e1 = pair_record(example_id="e1", n_segments=4, base_wall_s=COST.cost(6, 200), base_forwards=6,
                     base_tokens_fed=200)  # 5.0 s
    chars = {"e0": (4, 8, 12, 16), "e1": (12, 24, 36, 48)}  # segment gaps around the steps' walls
    write_record_set(tmp_path, RecordSet([e0, e1], [*_steps(e0, chars["e0"]), *_steps(e1, chars["e1"])]))
    users = 40
    cfg = TypingConfig(policies=["every"], populations=["desktop"], users=users, seed=5)
    tables = build_population(tmp_path, cfg, threads=1)
    walls = [2.23, 1.66, 0.65, 1.17]  # tests/streamgen/timing/test_typing_policies.py's law on these steps
    rates = chars_per_s(Population(_fixed(), users, 5).speeds_wpm())
    waits, keeps, below = [], [], []
    for ex, base in (("e0", 3.0), ("e1", 5.0)):
        for r in rates:
            w, k = _every_wait([c / r for c in chars[ex]], walls)
            waits.append(w)
            keeps.append(k)
            below.append(w < base)
    assert 0 < sum(keeps) < len(keeps)  # the population holds users who keep up and users who do not
    assert _quantile(waits, 0.8) < _quantile(waits, 0.9) < max(waits)  # the tail is spread: p90 is p90
    row = tables.summary.to_pylist()
    assert len(row) == 1 and row[0]["n"] == 2 * users and row[0]["users"] == users and row[0]["seed"] == 5
    assert row[0]["p50_wait_s"] == pytest.approx(_quantile(waits, 0.5))
    assert row[0]["p90_wait_s"] == pytest.approx(_quantile(waits, 0.9))
    assert row[0]["keeps_up_share"] == pytest.approx(sum(keeps) / len(keeps))
    assert row[0]["beats_base_share"] == pytest.approx(sum(below) / len(below))
    per_user = [r for r in tables.examples.to_pylist() if r["example_id"] == "e1"]
    assert [r["user"] for r in per_user] == list(range(users))
    assert [r["wait_s"] for r in per_user] == pytest.approx(waits[users:])


def test_the_report_writes_the_population_table_and_figure(tmp_path: Path) -> None:
    from analysis.report import write_report

    e0 = pair_record(example_id="e0", n_segments=4, base_wall_s=COST.cost(4, 100), base_forwards=4,
                     base_tokens_fed=100)
    write_record_set(tmp_path / "r", RecordSet([e0], _steps(e0, (10, 20, 30, 40))))
    report = write_report(tmp_path / "r", out_dir=tmp_path / "out", threads=1,
                          typing_config=TypingConfig(populations=["desktop", "mobile"], users=30))
    assert "## Typist populations" in report.markdown_path.read_text()
    assert (tmp_path / "out" / "population.csv").exists() and (tmp_path / "out" / "population-wait-m-ar-greedy.png").exists()


# ------------------------------------------------------------------------------------------
# logged typists in the population table (python -m analysis.report DIR --keylog FILE)
# ------------------------------------------------------------------------------------------

SEGMENTS = ("aaaa", "bbbb", "cccc", "dddd")  # e0's request, one segment per step (chars 4, 8, 12, 16)
# e0 logged keystroke by keystroke every 0.5 s: a typo in segment 2 (not a prefix until fixed) and segment
# 3's last character deleted and retyped; no log for e1.
E0_LOG = [(0.0, "a"), (0.5, "aa"), (1.0, "aaa"), (1.5, "aaaa"),
          (2.0, "aaaab"), (2.5, "aaaabX"), (3.0, "aaaabXb"), (3.5, "aaaabX"), (4.0, "aaaab"), (4.5, "aaaabb"),
          (5.0, "aaaabbb"), (5.5, "aaaabbbb"),
          (6.0, "aaaabbbbc"), (6.5, "aaaabbbbcc"), (7.0, "aaaabbbbccc"), (7.5, "aaaabbbbcccc"),
          (8.0, "aaaabbbbccc"), (8.5, "aaaabbbbcccc"),
          (9.0, "aaaabbbbccccd"), (9.5, "aaaabbbbccccdd"), (10.0, "aaaabbbbccccddd"), (10.5, "aaaabbbbccccdddd")]
E0_ARRIVALS = [1.5, 5.5, 8.5, 10.5]  # read off the log: when each prefix is in for good


def _logged_results(root: Path) -> Path:
    import dataclasses

    e0 = pair_record(example_id="e0", n_segments=4, base_wall_s=COST.cost(4, 100), base_forwards=4,
                     base_tokens_fed=100)  # 3.0 s
    e1 = pair_record(example_id="e1", n_segments=4, base_wall_s=COST.cost(6, 200), base_forwards=6,
                     base_tokens_fed=200)
    steps = [dataclasses.replace(s, arrived_text=t) for s, t in zip(_steps(e0, (4, 8, 12, 16)), SEGMENTS, strict=True)]
    steps += [dataclasses.replace(s, arrived_text="x" * 12) for s in _steps(e1, (12, 24, 36, 48))]
    write_record_set(root, RecordSet([e0, e1], steps))
    return root


def _write_log(path: Path, states: list[tuple[float, str]], example_id: str = "e0") -> Path:
    path.write_text(json.dumps({"example_id": example_id, "states": [list(s) for s in states]}) + "\n")
    return path


def test_a_logged_typist_waits_as_its_log_says(tmp_path: Path) -> None:
    from analysis.population import LoggedTypists

    root = _logged_results(tmp_path / "r")
    logged = LoggedTypists.read(_write_log(tmp_path / "mine.jsonl", E0_LOG))
    tables = build_population(root, TypingConfig(policies=["every"]), threads=1, logged=logged)
    rows = tables.examples.to_pylist()
    assert [(r["example_id"], r["preset"], r["user"]) for r in rows] == [("e0", "keylog:mine.jsonl", 0)]  # e1: no log
    wait, keeps = _every_wait(E0_ARRIVALS, [2.23, 1.66, 0.65, 1.17])  # the steps' walls, as above
    assert rows[0]["wait_s"] == pytest.approx(wait) and rows[0]["keeps_up"] == keeps
    assert rows[0]["user_wpm"] == pytest.approx(16 / 5 / (10.5 / 60))
    (summary,) = tables.summary.to_pylist()
    assert summary["preset"] == "keylog:mine.jsonl" and summary["n"] == 1 and summary["p50_wait_s"] == pytest.approx(wait)


def test_logged_typists_join_the_presets_in_the_report(tmp_path: Path) -> None:
    from analysis.report import main

    root = _logged_results(tmp_path / "r")
    log_path = _write_log(tmp_path / "mine.jsonl", E0_LOG)
    assert main([str(root), "--out", str(tmp_path / "out"), "--threads", "1", "--keylog", str(log_path),
                 "--typing", "populations=[desktop]", "users=5", "policies=[every]"]) == 0
    text = (tmp_path / "out" / "population.csv").read_text()
    assert '"keylog:mine.jsonl",1,0,"every"' in text and '"desktop",5,0,"every"' in text
    assert (tmp_path / "out" / "population-wait-m-ar-greedy.png").exists()
    assert "keylog:" in (tmp_path / "out" / "report.md").read_text()


def test_a_log_that_cannot_be_replayed_is_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from analysis.report import main

    root = _logged_results(tmp_path / "r")
    args = [str(root), "--out", str(tmp_path / "out"), "--threads", "1", "--no-figures", "--keylog"]
    assert main([*args, str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read the keystroke log" in capsys.readouterr().err
    other = _write_log(tmp_path / "other.jsonl", [*E0_LOG[:-1], (10.5, "aaaabbbbccccdddX")])
    assert main([*args, str(other)]) == 2
    err = capsys.readouterr().err
    assert "not its request: they differ from character 15" in err and "Traceback" not in err


def test_the_request_is_rebuilt_edit_by_edit() -> None:
    from analysis.population import request_text

    assert request_text(["Hx", "llo", " you"], [None, 1, None]) == "Hllo you"
    assert request_text(["ab", "c"]) == "abc"
    assert request_text(["ab", None]) is None
