"""Damaged checkpoints, each refused by the pre-flight in one line naming the file and the fix, never a
traceback (issue 52): every file the pre-flight and the estimate read may be empty, cut, not JSON or
JSON of another shape; the weight map is checked as the loader will read it; the cache is found as
huggingface_hub finds it. The fixtures are the scaled study checkpoints of tests/support/checkpoint_cache.py,
damaged here by design; what each must say follows from that design."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.grid.checkpoint_preflight import preflight
from streamgen.config import ModelConfig, model_config
from streamgen.models.hub_cache import hub_cache_dir
from tests.support.checkpoint_cache import (
    COMMIT,
    STUDY_MODELS,
    fixture,
    scaled_config,
    weight_shapes,
    write_safetensors,
    write_snapshot,
)

REPO = Path(__file__).resolve().parents[3]
SHARD1 = "model-00001-of-00005.safetensors"  # Qwen3-8B's fixture: 5 shards
SHARD2 = "model-00002-of-00005.safetensors"
QWEN_FETCH = "download it again: hf download Qwen/Qwen3-8B"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hub"
    root.mkdir()
    for var in ("HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


def one_line(model: str, cfg: ModelConfig | None = None) -> str:
    """The pre-flight's only problem for ``model``: one line, starting with the model's name."""
    problems = preflight({model: cfg or model_config(model)}).problems
    assert len(problems) == 1, problems
    (line,) = problems
    assert line.startswith(f"model {model}: ") and "\n" not in line and "Traceback" not in line
    return line


def index_of(folder: Path) -> dict[str, str]:
    return dict(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"])


def shard_shapes(folder: Path, shard: str) -> dict[str, tuple[int, ...]]:
    """The tensors of ``shard`` as the fixture wrote them (from the index and the fixture's shapes)."""
    fx = fixture("qwen3-8b")
    shapes = weight_shapes(fx, scaled_config(fx))
    return {n: shapes[n] for n, f in index_of(folder).items() if f == shard}


def header_length(path: Path) -> int:
    with path.open("rb") as f:
        return int(struct.unpack("<Q", f.read(8))[0])


# --------------------------------------------------------------------------------------------
# Damaged files: each one line naming the file and the fix
# --------------------------------------------------------------------------------------------


def test_a_header_cut_mid_json_is_one_line(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    shard = folder / SHARD1
    os.truncate(shard, 8 + header_length(shard) // 2)  # the download stopped inside the JSON header
    line = one_line("qwen3-8b")
    assert str(shard) in line and "a cut download" in line and line.endswith(QWEN_FETCH)


def test_a_header_that_is_not_json_is_one_line(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    shard = folder / SHARD1
    with shard.open("r+b") as f:
        f.seek(8)
        f.write(b"{\"model.x\": [")  # the length field is intact, the JSON is not
    line = one_line("qwen3-8b")
    assert f"{shard}: its header is not valid JSON" in line and line.endswith(QWEN_FETCH)


def test_a_zero_byte_shard_is_one_line(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    (folder / SHARD2).write_bytes(b"")
    line = one_line("qwen3-8b")
    assert f"{folder / SHARD2} is 0 bytes, shorter than a safetensors header" in line and line.endswith(QWEN_FETCH)


def test_a_data_region_shorter_than_the_header_says_is_found_by_its_length(cache: Path) -> None:
    """The check is a stat of the file: nothing of the data region is read (it is a sparse hole here)."""
    folder = write_snapshot(cache, "qwen3-8b")
    shard = folder / SHARD1
    size = shard.stat().st_size
    need = size - 8 - header_length(shard)
    os.truncate(shard, size - 2)
    line = one_line("qwen3-8b")
    assert f"{shard}: its data region is {need - 2} bytes but its header's offsets need {need} (truncated)" in line
    assert line.endswith(QWEN_FETCH)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "model.safetensors.index.json",
                                  "generation_config.json", "tokenizer.json"])
@pytest.mark.parametrize("content", ["{\"vocab_size\": 151936, ", ""], ids=["invalid", "empty"])
def test_a_json_file_that_is_not_json_is_one_line(cache: Path, name: str, content: str) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    (folder / name).write_text(content)
    line = one_line("qwen3-8b")
    assert f"{folder / name} is {'not valid JSON' if content else 'empty'}" in line and line.endswith(QWEN_FETCH)


@pytest.mark.parametrize(("name", "content", "said"), [
    ("config.json", [1, 2], "holds a JSON list, not an object"),
    ("model.safetensors.index.json", {"weight_map": [SHARD1]}, "field weight_map is not an object"),
    ("tokenizer_config.json", {"added_tokens_decoder": ["<|im_end|>"]}, "field added_tokens_decoder is not"),
    ("generation_config.json", {"eos_token_id": "<|im_end|>"}, "field eos_token_id is not a token id"),
    ("tokenizer.json", {"added_tokens": [{"content": "<|im_end|>"}]}, "field added_tokens is not a list of {id"),
])
def test_json_of_the_wrong_shape_names_the_file_and_field(cache: Path, name: str, content: object, said: str) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    (folder / name).write_text(json.dumps(content))
    line = one_line("qwen3-8b")
    assert f"{folder / name}" in line and said in line and line.endswith(QWEN_FETCH)


def test_config_with_a_field_of_the_wrong_type_says_it_does_not_build(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    fx = fixture("qwen3-8b")
    (folder / "config.json").write_text(json.dumps({**scaled_config(fx), "num_hidden_layers": "two"}))
    line = one_line("qwen3-8b")
    assert "config.json does not build the project's autoregressive model" in line


# --------------------------------------------------------------------------------------------
# The weight map as the loader reads it
# --------------------------------------------------------------------------------------------

TENSOR = "model.layers.1.mlp.up_proj.weight"


def test_a_tensor_the_index_names_but_no_shard_holds_is_named(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    shard = index_of(folder)[TENSOR]
    kept = {n: s for n, s in shard_shapes(folder, shard).items() if n != TENSOR}
    write_safetensors(folder / shard, kept)  # the index still names it there
    line = one_line("qwen3-8b")
    assert f"{TENSOR} (named in {shard}, in no shard)" in line and "index.json names 1 tensors" in line


def test_a_tensor_in_another_shard_than_the_index_names_is_named(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    named = index_of(folder)[TENSOR]
    other = next(f for f in (SHARD1, SHARD2) if f != named)
    moved = shard_shapes(folder, named)
    shape = moved.pop(TENSOR)
    write_safetensors(folder / named, moved)
    write_safetensors(folder / other, {**shard_shapes(folder, other), TENSOR: shape})
    line = one_line("qwen3-8b")
    assert f"{TENSOR} (named in {named}, held by {other})" in line


def test_a_tensor_in_two_shards_is_named(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    named = index_of(folder)[TENSOR]
    other = next(f for f in (SHARD1, SHARD2) if f != named)
    write_safetensors(folder / other, {**shard_shapes(folder, other), TENSOR: shard_shapes(folder, named)[TENSOR]})
    line = one_line("qwen3-8b")
    assert "1 tensors are in more than one shard" in line and TENSOR in line
    assert named in line and other in line


@pytest.mark.parametrize("model", ["qwen3-8b", "llada-8b"])
def test_an_int8_tensor_where_bf16_is_expected_is_refused(cache: Path, model: str) -> None:
    folder = write_snapshot(cache, model)
    weight_map = index_of(folder)
    name = sorted(weight_map)[0]
    fx = fixture(model)
    shapes = weight_shapes(fx, scaled_config(fx))
    shard = weight_map[name]
    write_safetensors(folder / shard, {n: shapes[n] for n, f in weight_map.items() if f == shard}, dtypes={name: "I8"})
    line = one_line(model)
    assert f"1 weights are integer or quantised where the model's parameters are float: {name} I8" in line
    assert "support no quantisation" in line


def test_a_sharded_transformers_checkpoint_without_its_index_is_refused(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    (folder / "model.safetensors.index.json").unlink()
    line = one_line("qwen3-8b")
    assert f"{folder} holds {SHARD1}" in line and "but no model.safetensors.index.json" in line


def test_the_in_project_loader_needs_no_index(cache: Path) -> None:
    """LLaDA is read by streamgen.models.checkpoint_io, which finds every *.safetensors itself."""
    folder = write_snapshot(cache, "llada-8b")
    (folder / "model.safetensors.index.json").unlink()
    assert preflight({"llada-8b": model_config("llada-8b")}).problems == []


# --------------------------------------------------------------------------------------------
# The cache found as huggingface_hub finds it; a snapshot lacking a file said as such
# --------------------------------------------------------------------------------------------


def test_a_snapshot_without_config_json_is_said_to_lack_it(cache: Path) -> None:
    folder = write_snapshot(cache, "qwen3-8b")
    (folder / "config.json").unlink()
    line = one_line("qwen3-8b")
    assert f"{folder} has no config.json; {QWEN_FETCH}" in line and "not in the Hugging Face cache" not in line


def test_huggingface_hub_cache_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    write_snapshot(tmp_path / "legacy", "dream-7b")
    checked = preflight({"dream-7b": model_config("dream-7b")})
    assert checked.problems == [] and checked.snapshots == {"dream-7b": COMMIT}


@pytest.mark.parametrize("value", ["~/hub", "$STREAMGEN_TEST_ROOT/hub", "${STREAMGEN_TEST_ROOT}/hub"])
def test_tilde_and_variables_in_the_cache_path_are_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             value: str) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("STREAMGEN_TEST_ROOT", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", value)
    write_snapshot(tmp_path / "hub", "dream-7b")
    assert hub_cache_dir() == tmp_path / "hub"
    assert preflight({"dream-7b": model_config("dream-7b")}).problems == []


def test_a_local_folder_with_a_tilde_is_expanded(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_snapshot(cache, "dream-7b")
    monkeypatch.setenv("HOME", str(folder.parent))
    cfg = dataclasses.replace(model_config("dream-7b"), source="local", path=f"~/{folder.name}")
    assert preflight({"dream-7b": cfg}).problems == []


ENVIRONMENTS = [
    {"HF_HUB_CACHE": "/a/hub", "HUGGINGFACE_HUB_CACHE": "/b/hub", "HF_HOME": "/c"},
    {"HUGGINGFACE_HUB_CACHE": "~/b", "HF_HOME": "/c"},
    {"HF_HOME": "$ROOT/c"},
    {"XDG_CACHE_HOME": "/x"},
    {},
]


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=lambda e: "+".join(e) or "none")
def test_the_cache_rule_is_huggingface_hubs(env: dict[str, str]) -> None:
    """huggingface_hub fixes its cache path when first imported: a fresh process per environment."""
    base = {k: v for k, v in os.environ.items() if k not in
            ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")}
    code = ("import huggingface_hub.constants as c; from streamgen.models.hub_cache import hub_cache_dir; "
            "print(c.HF_HUB_CACHE); print(hub_cache_dir())")
    out = subprocess.run([sys.executable, "-c", code], env={**base, "ROOT": "/r", **env}, cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert Path(out[0]) == Path(out[1]), out


# --------------------------------------------------------------------------------------------
# Chat templates; healthy controls
# --------------------------------------------------------------------------------------------


def test_an_instruct_model_without_a_chat_template_is_refused(cache: Path) -> None:
    folder = write_snapshot(cache, "llama-3.1-8b-instruct")
    meta = json.loads((folder / "tokenizer_config.json").read_text())
    del meta["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(meta))
    line = one_line("llama-3.1-8b-instruct")
    assert "has no chat template" in line and "chat_template_required: false" in line
    base = dataclasses.replace(model_config("llama-3.1-8b-instruct"), chat_template_required=False)
    assert preflight({"llama-3.1-8b-instruct": base}).problems == []  # a base model says so in its YAML
    (folder / "chat_template.jinja").write_text("{{ messages }}")  # transformers 5's own file
    assert preflight({"llama-3.1-8b-instruct": model_config("llama-3.1-8b-instruct")}).problems == []


@pytest.mark.parametrize("model", STUDY_MODELS)
def test_healthy_checkpoints_with_every_optional_file_pass(cache: Path, model: str) -> None:
    """The controls: each study checkpoint, with a generation_config.json and a tokenizer.json of the right
    shape beside the fixture's files, passes every check (tests/jobs/grid/test_checkpoint_preflight.py: without them)."""
    folder = write_snapshot(cache, model)
    eos = fixture(model)["tokenizer"]["eos_token"]
    eos_text = eos["content"] if isinstance(eos, dict) else eos
    added = fixture(model)["tokenizer"]["added_tokens_decoder"]
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [int(i) for i, t in added.items()
                                                                                if t["content"] == eos_text]}))
    (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"id": int(i), "content": t["content"]}
                                                                        for i, t in added.items()]}))
    assert preflight({model: model_config(model)}).problems == []


def test_a_damaged_config_leaves_the_estimate_on_the_yaml(cache: Path) -> None:
    from streamgen.sizing.parameters import model_size

    folder = write_snapshot(cache, "qwen3-8b")
    assert model_size(model_config("qwen3-8b")).source == "config.json"  # type: ignore[union-attr]
    (folder / "config.json").write_text("{\"hidden_size\": ")
    size = model_size(model_config("qwen3-8b"))
    assert size is not None and size.source == "configs/models/qwen3-8b.yaml"


# --------------------------------------------------------------------------------------------
# As a new user meets them: the dry run in its own process
# --------------------------------------------------------------------------------------------


def dry_run(cache_env: dict[str, str], results: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME")}
    return subprocess.run([sys.executable, "workflows/full_grid.py", "grid=full", "models=[qwen3-8b,dream-7b]",
                           "benchmarks=[coedit]", f"results_dir={results}", "--dry-run"],
                          env={**env, **cache_env}, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_dry_run_refuses_damaged_files_in_one_line_each(cache: Path, tmp_path: Path) -> None:
    """A cut shard header (Qwen3) and a config.json that is not JSON (Dream, read by the pre-flight and the
    estimate): exit 2, one line each naming the file and the download command, no traceback."""
    qwen = write_snapshot(cache, "qwen3-8b")
    os.truncate(qwen / SHARD1, 8 + header_length(qwen / SHARD1) // 2)
    dream = write_snapshot(cache, "dream-7b")
    (dream / "config.json").write_text("{\"hidden_size\": 64,")
    run = dry_run({"HF_HUB_CACHE": str(cache)}, tmp_path / "r")
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr + run.stdout
    lines = [x for x in run.stderr.splitlines() if x.startswith("  - model ")]
    (q,) = [x for x in lines if x.startswith("  - model qwen3-8b: ")]
    (d,) = [x for x in lines if x.startswith("  - model dream-7b: ")]
    assert str(qwen / SHARD1) in q and q.endswith(QWEN_FETCH)
    assert f"{dream / 'config.json'} is not valid JSON" in d
    assert d.endswith("download it again: hf download Dream-org/Dream-v0-Instruct-7B")


def test_the_dry_run_finds_a_cache_named_by_huggingface_hub_cache_with_a_tilde(tmp_path: Path) -> None:
    for model in ("qwen3-8b", "dream-7b"):
        write_snapshot(tmp_path / "legacy", model)
    run = dry_run({"HUGGINGFACE_HUB_CACHE": "~/legacy", "HOME": str(tmp_path)}, tmp_path / "r")
    assert "Traceback" not in run.stderr + run.stdout
    assert "not in the Hugging Face cache" not in run.stderr
    for model in ("qwen3-8b", "dream-7b"):
        assert f"checkpoint {model}: snapshot {COMMIT}" in run.stdout, run.stderr[-2000:]


def test_diffusion_gemma_files_are_checked_though_its_model_is_not_built(tmp_path: Path) -> None:
    """The pre-flight does not build DiffusionGemma on the meta device, but reads its files as any other's:
    a healthy folder passes, a zero-byte weights file is one line."""
    from streamgen.families.diffusion_gemma.plugin import tiny_diffusion_gemma
    from streamgen.models.tokenizers import tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_diffusion_gemma(1, len(tok), eos_token_id=tok.eos_token_id).save_pretrained(tmp_path / "dg")
    tok.save_pretrained(tmp_path / "dg")
    cfg = ModelConfig(name="dg", family="diffusion_gemma", source="local", path=str(tmp_path / "dg"))
    assert preflight({"dg": cfg}).problems == []
    (tmp_path / "dg" / "model.safetensors").write_bytes(b"")
    line = one_line("dg", cfg)
    assert f"{tmp_path / 'dg' / 'model.safetensors'} is 0 bytes" in line
    assert line.endswith(f"copy the checkpoint into {tmp_path / 'dg'} again (or fix path:)")
