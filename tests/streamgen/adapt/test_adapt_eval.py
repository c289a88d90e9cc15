"""An adapted model through the grid's own path (plan → actor → scoring → writer) and into Table 3.

The adapted model is a tiny llama with a seeded non-zero LoRA merged in, registered by the same
``write_model_yaml`` the workflow uses, in a copy of configs/ (``STREAMGEN_CONFIGS``). The actor runs
in-process (``jobs.run.actors.ModelActor``), so no Ray start is paid here; the Ray path is the smoke chain's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from analysis.tables import build_tables
from jobs.grid.plan import plan_grid
from jobs.run.actors import ModelActor
from jobs.run.rows import score_shard
from jobs.run.writer import ResultWriter
from streamgen.adapt.config import LoraSettings
from streamgen.adapt.merge import adapted_config, merged_model, save_model_folder, write_model_yaml
from streamgen.adapt.train import lora_model
from streamgen.config import REPO_ROOT, ConfigError, grid_config, model_config, validate_grid
from streamgen.models.weights import load_model_and_tokenizer

VARIANT = "x-7"


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> Path:
    """A copy of configs/ with an adapted tiny llama registered in it."""
    root = tmp_path_factory.mktemp("adapted")
    configs = root / "configs"
    shutil.copytree(REPO_ROOT / "configs", configs)
    loaded = load_model_and_tokenizer(model_config("tiny-llama"))
    model = lora_model(loaded.model, LoraSettings(), seed=0)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    folder = save_model_folder(merged_model(model), loaded.tokenizer, root / "model")
    cfg = adapted_config(model_config("tiny-llama"), "tiny-llama-x", folder, VARIANT, "Answer early.")
    write_model_yaml(cfg, configs / "models", "test")
    return configs


def test_variant_rows_sit_next_to_the_plain_model_in_table3(configs: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    grid = grid_config("adapt-smoke", ["models=[tiny-llama,tiny-llama-x]", "limit=2", "max_new_tokens=6",
                                       f"results_dir={tmp_path}"])
    plan = plan_grid(grid)
    writer = ResultWriter(tmp_path)
    for model in ("tiny-llama", "tiny-llama-x"):
        actor = ModelActor(plan.models[model])
        for shard in (s for s in plan.shards if s.model_name == model):
            task = plan.task(shard, "run-1", "test")
            rows = score_shard(task, actor.run_shard(task))
            writer.write_shard(shard, rows.pairs, rows.steps)
    pairs = [r for f in sorted(tmp_path.glob("pairs/**/*.parquet")) for r in pq.read_table(f).to_pylist()]
    variant = [r for r in pairs if r["variant"] == VARIANT]
    plain = [r for r in pairs if r["variant"] is None]
    assert len(variant) == len(plain) == 2
    assert {r["model"] for r in pairs} == {"tiny-llama"}  # the variant's rows carry the plain model's name
    assert {r["cell_id"] for r in variant}.isdisjoint({r["cell_id"] for r in plain})
    assert [r["base_answer"] for r in variant] != [r["base_answer"] for r in plain], "the adapter changes answers"

    table = build_tables(tmp_path, ["adaptation"])["adaptation"].to_pylist()
    row = next(r for r in table if r["scope"] == "benchmark")
    assert (row["model"], row["benchmark"], row["variant"]) == ("tiny-llama", "mbpp", VARIANT)
    assert row["n_before"] == row["n_after"] == 2
    for side, rows in (("before", plain), ("after", variant)):
        preserved = sum(r["accepted_tokens_final"] for r in rows) / sum(r["draft_tokens_final"] for r in rows)
        speedups = sorted(r["base_forwards"] / r["residual_forwards"] for r in rows)
        assert row[f"preserved_share_{side}"] == pytest.approx(preserved)
        assert row[f"one_forward_share_{side}"] == pytest.approx(sum(r["residual_forwards"] == 1 for r in rows) / 2)
        assert row[f"mean_speedup_{side}"] == pytest.approx(sum(speedups) / 2)
        assert row[f"median_speedup_{side}"] == pytest.approx(sum(speedups) / 2)  # median of two
    assert any(r["scope"] == "macro" for r in table)


def test_two_models_writing_the_same_model_and_variant_are_refused(configs: Path, monkeypatch) -> None:
    monkeypatch.setenv("STREAMGEN_CONFIGS", str(configs))
    shutil.copy(configs / "models" / "tiny-llama-x.yaml", configs / "models" / "tiny-llama-y.yaml")
    text = (configs / "models" / "tiny-llama-y.yaml").read_text().replace("name: tiny-llama-x", "name: tiny-llama-y")
    (configs / "models" / "tiny-llama-y.yaml").write_text(text)
    grid = grid_config("adapt-smoke", ["models=[tiny-llama,tiny-llama-x,tiny-llama-y]"])
    assert any("same (model, variant)" in p for p in validate_grid(grid))
    with pytest.raises(ConfigError, match="base_model=tiny-llama needs variant"):
        from streamgen.config import raise_if_problems, validate_model

        raise_if_problems(validate_model(model_config("tiny-llama-y", ["variant=null"])))


def test_preserved_share_is_a_ratio_of_token_sums(tmp_path: Path) -> None:
    """Σ accepted / Σ draft over the cell's included requests (long drafts weigh more), not a mean of ratios."""
    from streamgen.results.records import PairRecord, to_table, write_parquet_atomic
    from tests.support.analysis_fixtures import pair_record

    rows = [pair_record(example_id=f"e{i}", variant=v, cell_id=str(v), draft_tokens_final=d,
                        accepted_tokens_final=a, residual_forwards=r)
            for v in (None, "lora") for i, (d, a, r) in enumerate([(4, 4, 1), (12, 0, 9), (6, 3, 4)])]
    rows.append(pair_record(example_id="x", variant="lora", cell_id="lora", draft_tokens_final=50,
                            accepted_tokens_final=50, excluded_reason="single_segment"))  # never counted
    write_parquet_atomic(to_table(rows, PairRecord), tmp_path / "pairs" / "p.parquet")
    row = next(r for r in build_tables(tmp_path, ["adaptation"])["adaptation"].to_pylist() if r["scope"] == "benchmark")
    assert row["preserved_share_before"] == row["preserved_share_after"] == pytest.approx(7 / 22)
    assert row["one_forward_share_after"] == pytest.approx(1 / 3) and row["n_after"] == 3
