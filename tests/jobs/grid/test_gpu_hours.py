"""The GPU-hour estimate's parts (jobs/grid/gpu_hours.py, streamgen/sizing/devices.py, streamgen/sizing/forward_counts.py,
streamgen/sizing/parameters.py, jobs/grid/unit_sizing.py): every expected number is a formula written out here."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from jobs.grid.gpu_hours import example_cost, workers_on
from streamgen.config import ClusterConfig, ConfigError, GridConfig, model_config
from streamgen.sizing.devices import DEVICES, Device, device_from_file, forward_seconds
from streamgen.sizing.forward_counts import Decode, decode_rule, total_forwards
from streamgen.sizing.parameters import ModelSize, model_size, size_from_config

A100 = DEVICES["a100-80gb"]


# --- the roofline -----------------------------------------------------------------------------------


def test_prefill_is_compute_bound_and_decode_bandwidth_bound_on_the_a100() -> None:
    n, layers = 8e9, 32
    prefill = forward_seconds(A100, params=n, tokens=500, layers=layers)
    compute = 2 * n * 500 / (312e12 * 0.5)  # 0.0513 s
    memory = n * 2 / (2.039e12 * 0.7)  # 0.0112 s: bf16 weights read once
    assert compute > memory
    assert prefill == pytest.approx(compute + layers * 1e-4)
    decode = forward_seconds(A100, params=n, tokens=1, layers=layers)
    assert 2 * n / (312e12 * 0.5) < memory
    assert decode == pytest.approx(memory + layers * 1e-4)


def test_float32_models_use_the_fp32_rate_and_four_bytes_a_parameter() -> None:
    dev = Device("x", bf16_flops=1e12, fp32_flops=2e11, bandwidth=1e10, memory_gb=1, eff_compute=1.0,
                 eff_bandwidth=1.0, layer_overhead_s=0.0)
    assert forward_seconds(dev, params=1e6, tokens=1000, layers=2, dtype="float32") == pytest.approx(
        max(2 * 1e6 * 1000 / 2e11, 4e6 / 1e10))
    assert forward_seconds(dev, params=1e6, tokens=1, layers=2, dtype="bfloat16") == pytest.approx(2e6 / 1e10)


def test_device_table_has_the_named_rows_with_datasheet_figures() -> None:
    assert set(DEVICES) == {"a100-80gb", "a6000", "h100", "h200", "cpu"}
    assert (DEVICES["a6000"].bf16_flops, DEVICES["a6000"].bandwidth, DEVICES["a6000"].memory_gb) == (154.8e12, 768e9, 48)
    assert (DEVICES["h200"].bandwidth, DEVICES["h200"].memory_gb) == (4.8e12, 141)
    assert all(d.source for d in DEVICES.values())


def test_a_device_file_replaces_the_cpu_row_and_a_bad_one_names_the_fix(tmp_path: Path) -> None:
    import json

    good = tmp_path / "machine.json"
    good.write_text(json.dumps(dataclasses.asdict(dataclasses.replace(DEVICES["cpu"], fp32_flops=1.5e11))))
    assert device_from_file(good).fp32_flops == 1.5e11
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match="bench_machine.py --out"):
        device_from_file(tmp_path / "bad.json")


def test_cluster_device_is_validated_naming_the_allowed_values() -> None:
    from jobs.cluster.executors import validate_cluster

    assert validate_cluster(ClusterConfig(device="a100-80gb")) == []
    (problem,) = validate_cluster(ClusterConfig(name="x", device="a100"))
    assert "device='a100'" in problem and "a100-80gb" in problem and "h200" in problem


# --- parameter counts --------------------------------------------------------------------------------


def test_parameters_from_a_config_equal_the_built_models_count() -> None:
    from streamgen.models.weights import tiny_model

    for arch in ("llama", "qwen3", "gemma3"):
        model = tiny_model(arch, 0, vocab_size=513)
        counted = sum(p.numel() for p in model.parameters())
        assert size_from_config(model.config.to_dict()) == ModelSize(counted, 2, "config.json"), arch


def test_llada_8b_from_its_public_config() -> None:
    cfg = {"d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32, "mlp_hidden_size": 12288,
           "vocab_size": 126464, "weight_tying": False}
    layer = 4 * 4096 * 4096 + 3 * 4096 * 12288 + 2 * 4096
    size = size_from_config(cfg)
    assert size is not None and size.parameters == 32 * layer + 2 * 126464 * 4096 + 4096  # ≈ 8.02e9
    assert size_from_config({"hidden_size": 8}) is None  # a partial config: the YAML's figure is used


def _moe_config(**experts: int) -> dict:
    """A DiffusionGemma-shaped config.json (transformers' DiffusionGemmaTextConfig field names, nested in
    ``text_config`` as the checkpoint nests them), small numbers."""
    text = {"model_type": "diffusion_gemma_text", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 32, "vocab_size": 100,
            "tie_word_embeddings": True, **experts}
    return {"model_type": "diffusion_gemma", "text_config": text}


def test_moe_experts_and_top_k_from_the_config_json() -> None:
    dense = size_from_config(_moe_config())
    assert dense is not None and dense.experts is None and dense.moe_source is None
    size = size_from_config(_moe_config(num_experts=4, top_k_experts=2, moe_intermediate_size=8))
    assert size is not None and (size.experts, size.top_k, size.moe_source) == (4, 2, "config.json")
    expert = 3 * 16 * 8  # gate, up, down
    per_layer = 4 * expert + 16 * 4 + 4 + 4 * 16  # the experts, router projection, per-expert scale, router scale + 3 norms
    assert size.parameters == dense.parameters + 2 * per_layer
    assert size.active == size.parameters - 2 * (4 - 2) * expert  # the top-2 experts instead of all 4
    other = size_from_config(_moe_config(num_local_experts=8, num_experts_per_tok=1, moe_intermediate_size=8))
    assert other is not None and (other.experts, other.top_k) == (8, 1)  # the Mixtral / Qwen-MoE names


def _dg_local(tmp_path: Path, config: dict) -> object:
    import json

    (tmp_path / "config.json").write_text(json.dumps(config))
    return dataclasses.replace(model_config("diffusiongemma-26b-a4b-it"), source="local", path=str(tmp_path))


def test_diffusiongemma_reads_its_cached_config_json_and_falls_back_to_its_yaml(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from jobs.cluster.dry_run import moe_lines

    yaml = model_config("diffusiongemma-26b-a4b-it")
    assert (yaml.experts, yaml.experts_per_token) == (128, 8)
    (tmp_path / "a").mkdir()
    read = model_size(_dg_local(tmp_path / "a", _moe_config(num_experts=4, top_k_experts=2, moe_intermediate_size=8)))
    assert read is not None and (read.experts, read.top_k, read.source, read.moe_source) == (4, 2, "config.json",
                                                                                             "config.json")
    (tmp_path / "b").mkdir()
    bare = model_size(_dg_local(tmp_path / "b", _moe_config()))  # no expert fields: the YAML's
    assert bare is not None and bare.source == "config.json"
    assert (bare.experts, bare.top_k, bare.active) == (128, 8, yaml.active_parameters)
    assert bare.moe_source == "configs/models/diffusiongemma-26b-a4b-it.yaml (no expert fields in config.json)"
    only_yaml = model_size(yaml)  # no config.json cached here
    assert only_yaml is not None and only_yaml.moe_source == "configs/models/diffusiongemma-26b-a4b-it.yaml"
    (line,) = moe_lines(SimpleNamespace(models={"dg": _dg_local(tmp_path / "a", _moe_config(
        num_experts=4, top_k_experts=2, moe_intermediate_size=8))}))  # type: ignore[arg-type]
    assert line == f"  - dg: a mixture of experts, 4 experts, 2 per token, {read.active:,} parameters active of " \
                   f"{read.parameters:,} (from config.json)"
    assert moe_lines(SimpleNamespace(models={"llama": model_config("llama-3.1-8b-instruct")})) == []  # type: ignore[arg-type]


def test_study_models_without_a_cached_config_use_their_yaml_and_ids_do_not_move() -> None:
    from streamgen.results.cells import config_settings

    cfg = model_config("llada-8b")
    assert model_size(cfg) == ModelSize(8_020_000_000, 32, "configs/models/llada-8b.yaml")
    bare = dataclasses.replace(cfg, parameters=None, layers=None)
    assert model_size(bare) is None
    assert config_settings("model", cfg) == config_settings("model", bare)  # not in fingerprints


def test_tiny_models_are_built_and_counted() -> None:
    from streamgen.models.weights import tiny_model

    size = model_size(model_config("tiny-llama"))
    assert size is not None and size.layers == 2
    assert size.parameters == sum(p.numel() for p in tiny_model("llama", 0).parameters())


# --- forwards: shared work once, the GPU cap ---------------------------------------------------------


@dataclasses.dataclass
class _Ex:
    history: tuple = ()
    system_prompt: str | None = None


def test_shared_work_is_counted_once_per_unit_not_per_cell() -> None:
    """scripted-llada-constant: gen 16, blocks of 8, 8 steps (4 per block). Base and step 1: 8 forwards
    each (base decodes of prefixes 3 and 1); a later step with nothing kept: 1 verify + the base decode
    of its prefix, 8, paid once per prefix: step 2 (prefix 2) 1 + 8, step 3 (prefix 3, the base run's) 1.
    Three segments. Five cells keeping nothing follow one path; forked, each pays its verifies (and the
    decodes are still once per prefix); without sharing each cell pays 8 + 8 + 9 + 9."""
    cfg = model_config("scripted-llada-constant")
    size = ModelSize(1_000, 2, "test")
    segments = ("Fix this. ", "It is wrong. ", "Thanks.")
    one = example_cost(cfg, "coedit", 16, _Ex(), segments, 1, A100, size)
    five = example_cost(cfg, "coedit", 16, _Ex(), segments, 5, A100, size)
    assert (one.shared_forwards, one.per_cell_forwards) == (8 + 8, (1 + 8) + 1)
    assert one.forwards == five.forwards == 16 + 10
    forked = example_cost(cfg, "coedit", 16, _Ex(), segments, 5, A100, size, forked=True)
    assert forked.forwards == 16 + 10 + 4 * (1 + 1)
    alone = example_cost(cfg, "coedit", 16, _Ex(), segments, 5, A100, size, share=False)
    assert alone.forwards == 5 * (8 + 8 + 9 + 9)
    assert five.seconds < forked.seconds < alone.seconds
    ar = model_config("scripted-ar-constant")  # no base decodes to reuse: each distinct step once
    ar_one = example_cost(ar, "coedit", 16, _Ex(), segments, 1, A100, size)
    ar_five = example_cost(ar, "coedit", 16, _Ex(), segments, 5, A100, size)
    assert ar_five.forwards == ar_one.forwards and ar_one.per_cell_forwards == 2 * 8  # 1 verify + 7 decodes
    assert example_cost(ar, "coedit", 16, _Ex(), segments, 5, A100, size, share=False).forwards == 5 * (8 + 8 + 16)


def test_a_kept_share_prices_each_cell_by_its_own_kept_run() -> None:
    """The same model and segments; later steps' drafts are half the budget (8 of 16 tokens). Kept
    whole (1.0): the floor, 2 forwards a step. Half (0.5, 4 kept): block 0 has 4 of 8 masked → ceil(4 ·
    4 / 8) = 2 steps, block 1 all 4 → 1 + 6 = 7. Nothing (0.0): 1 + 8 = 9. Under the earlier rules
    (full_block_refill + refill_after_eos) a draft kept whole still refills block 1 whole: 1 + 4 = 5."""
    cfg = model_config("scripted-llada-constant")
    size = ModelSize(1_000, 2, "test")
    segments = ("Fix this. ", "It is wrong. ", "Thanks.")
    mixed = example_cost(cfg, "coedit", 16, _Ex(), segments, 3, A100, size, kept=[1.0, 0.5, 0.0])
    # three paths; the one keeping nothing pays prefix 2's decode once (1 + 8), and prefix 3's not (the base run)
    assert mixed.forwards == 16 + 2 * 2 + 2 * 7 + (9 + 1) and mixed.per_cell_forwards == 2 * 2
    earlier = dataclasses.replace(cfg, decoding={**cfg.decoding, "full_block_refill": True, "refill_after_eos": True})
    assert example_cost(earlier, "coedit", 16, _Ex(), segments, 1, A100, size, kept=[1.0]).per_cell_forwards == 2 * 5
    with pytest.raises(ValueError, match="one share in"):
        example_cost(cfg, "coedit", 16, _Ex(), segments, 2, A100, size, kept=[1.0])


def test_workers_are_capped_at_the_allocations_gpus() -> None:
    grid = GridConfig(workers=8)
    assert workers_on(grid, ClusterConfig(nodes=1, gpus_per_node=2)) == 2
    assert workers_on(grid, ClusterConfig(nodes=2, gpus_per_node=8)) == 8
    assert workers_on(grid, ClusterConfig(gpus_per_node=0)) == 8  # CPU: the grid's own workers


def test_wall_time_is_total_over_workers_or_the_longest_unit() -> None:
    from jobs.grid.gpu_hours import Estimate

    est = Estimate(A100, (), {"a": 3600.0, "b": 3600.0, "c": 7200.0}, workers=2, unknown=())
    assert est.wall_h == pytest.approx(max(14400 / 2, 7200) / 3600)
    assert dataclasses.replace(est, workers=8).wall_h == pytest.approx(2.0)  # the longest unit bounds it


# --- the per-family rules on hand-made decodes --------------------------------------------------------


def test_llada_rule_follows_the_schedule_blocks_and_the_kept_run() -> None:
    rule = decode_rule(model_config("tiny-llada"), "coedit", 16)  # gen 32, blocks of 16, 8 steps each
    assert total_forwards(rule(Decode(40, 32))) == 16
    # block 0 has 13 of its 16 positions masked: ceil(13 · 8 / 16) steps at the official rate; block 1 all 8
    assert total_forwards(rule(Decode(40, 32, draft=20, accepted=3))) == 1 + math.ceil(13 * 8 / 16) + 8
    assert total_forwards(rule(Decode(40, 32, draft=20, accepted=16))) == 1 + 8  # the first block is kept
    assert total_forwards(rule(Decode(40, 32, draft=32, accepted=32))) == 2  # the floor
    assert {f.tokens for f in rule(Decode(40, 32))} == {40 + 32}


def test_autoregressive_rule_counts_one_forward_per_token_after_the_first() -> None:
    rule = decode_rule(model_config("tiny-llama"), "coedit", 16)
    assert total_forwards(rule(Decode(30, 16))) == 16
    assert total_forwards(rule(Decode(30, 10, draft=9, accepted=4))) == 1 + (10 - 4 - 1)
    assert total_forwards(rule(Decode(30, 9, draft=9, accepted=9))) == 1


# --- units sized to the work ----------------------------------------------------------------------------


def _plan(overrides: list[str]):  # type: ignore[no-untyped-def]
    from jobs.grid.plan import plan_grid
    from streamgen.config import grid_config

    return plan_grid(grid_config("smoke", ["models=[tiny-llada,tiny-llama]", "benchmarks=[coedit]", "limit=6",
                                           *overrides]))


def test_auto_shard_sizes_keep_every_unit_within_the_fraction_of_the_limit() -> None:
    from jobs.grid.gpu_hours import unit_seconds
    from jobs.grid.shards import size_key
    from jobs.grid.unit_sizing import UNIT_FRACTION, auto_shard_sizes, target_unit_s
    plan = _plan(["shard_size=1"])
    slow = dataclasses.replace(DEVICES["cpu"], fp32_flops=2e6, bandwidth=1e9, layer_overhead_s=0.0)
    cluster = ClusterConfig(timeout_min=30)  # a target between one diffusion example and a few autoregressive ones
    assert target_unit_s(cluster) == UNIT_FRACTION * 30 * 60
    cells = list({s.cell.cell_id: s.cell for s in plan.shards}.values())
    sizes = auto_shard_sizes(cells, plan.examples, plan.segments, plan.excluded, cluster=cluster, device=slow)
    per_example = {u: t for u, t in unit_seconds(plan, slow).items()}  # shard_size=1: one example per unit
    for cell in cells:
        key = size_key(cell)
        worst = max(per_example[s.shard_id] for s in plan.shards if size_key(s.cell) == key)
        assert 1 <= sizes[key] <= 6
        assert sizes[key] == max(1, min(6, math.floor(target_unit_s(cluster) / worst)))
        assert sizes[key] * worst <= target_unit_s(cluster) or sizes[key] == 1
    assert sizes["tiny-llada/coedit"] < sizes["tiny-llama/coedit"]  # the diffusion model gets smaller units


def test_auto_shards_are_deterministic_and_get_timeouts_from_their_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.grid.gpu_hours import grid_device, unit_seconds
    from jobs.grid.unit_sizing import TIMEOUT_FACTOR, TIMEOUT_FLOOR_S, unit_timeout_s, unit_timeouts

    one, two = _plan(["shard_size=auto"]), _plan(["shard_size=auto"])
    assert [s.shard_id for s in one.shards] == [s.shard_id for s in two.shards]
    assert unit_timeout_s(10.0) == TIMEOUT_FLOOR_S
    assert unit_timeout_s(1000.0) == TIMEOUT_FACTOR * 1000.0
    est = unit_seconds(one, grid_device(one.grid))
    assert unit_timeouts(one) == {k: unit_timeout_s(v) for k, v in est.items()}
    assert set(unit_timeouts(one)) == {s.shard_id for s in one.shards}


def test_auto_needs_every_models_size() -> None:
    from jobs.grid.gpu_hours import require_sizes

    with pytest.raises(ConfigError, match="parameters:"):
        require_sizes({"llada-8b": dataclasses.replace(model_config("llada-8b"), parameters=None)})


def test_shard_size_accepts_integers_and_auto_only() -> None:
    from streamgen.config import grid_config, validate_grid

    for value, ok in (("auto", True), ("3", True), ("0", False), ("x", False), ("2.5", False)):
        problems = [p for p in validate_grid(grid_config("smoke", [f"shard_size={value}"])) if "shard_size" in p]
        assert (problems == []) is ok, value


def test_full_grid_dry_run_prints_the_estimate_before_the_preflight_refusal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No study checkpoint is cached here: the plan and the estimate (from the YAMLs' parameter counts)
    still print, then the run is refused (rc 2) with one line per missing checkpoint."""
    from workflows import full_grid

    code = full_grid.main(["grid=full", "benchmarks=[coedit]", "limit=4", f"results_dir={tmp_path}", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    assert "dry run of grid 'full'" in out and "estimate:" in out and "GPU-hours" in out
    table = [x for x in out.splitlines() if x.split()[:1] and x.split()[0] in
             ("gemma-3-12b-it", "llama-3.1-8b-instruct", "qwen3-8b", "refusion-8b", "llada-8b", "dream-7b")
             and " / " not in x]  # the estimate's rows, not the plan's cells
    warm = [x for x in table if x.split()[1] == "warm-up"]  # one row per model: its actors' warm-up pairs
    table = [x for x in table if x not in warm]
    assert len(table) == 6 and all(x.split()[1] == "coedit" for x in table)
    assert len(warm) == 6 and all("1 pair on coedit" in x for x in warm)
    assert sum(" is not in the Hugging Face cache" in x for x in err.splitlines()) == 6


def test_refusion_rule_prices_two_forwards_per_position_left() -> None:
    """tiny-refusion: gen 32, blocks of 16, slots of 4. Keeping 1 token leaves 31 positions, cut into slots
    of 4, 4, 4, 3 (block 1) and 4 × 4 (block 2); a slot of k costs plan + verify + (k − 1) × 2 = 2k."""
    rule = decode_rule(model_config("tiny-refusion"), "coedit", 16)
    assert total_forwards(rule(Decode(40, 32, draft=32, accepted=1))) == 1 + 2 * 31
    assert total_forwards(rule(Decode(40, 32))) == 2 * 32  # the first plan carries the prompt
    assert total_forwards(rule(Decode(40, 10))) == 2 * 16  # it stops after the block holding the end
    assert total_forwards(rule(Decode(40, 7, draft=7, accepted=7))) == 1 + 2  # kept whole: verify + confirm


def test_llada_rule_at_the_official_refill_rate() -> None:
    """Issue 39's refill (decoders with ``full_block_refill: false``): a block with m of its B = 16 positions
    masked runs ceil(m · 8 / 16) steps; a kept EOS-ended draft is confirmed in one step."""
    from streamgen.families.bidirectional.forward_rule import bidirectional
    from streamgen.families.bidirectional.sampler import bidir_settings_from, geometry

    geo = geometry(bidir_settings_from(dict(model_config("tiny-llada").decoding)), 16)
    rule = lambda d: bidirectional(geo, d, full_block_refill=False, refill_after_eos=False)  # noqa: E731
    assert total_forwards(rule(Decode(40, 32))) == 16  # a base run: every step
    assert total_forwards(rule(Decode(40, 32, draft=20, accepted=3))) == 1 + math.ceil(13 * 8 / 16) + 8
    assert total_forwards(rule(Decode(40, 32, draft=20, accepted=20))) == 2  # kept whole with its EOS
    assert total_forwards(rule(Decode(40, 32, draft=32, accepted=0))) == 1 + 16  # nothing kept: a base run
