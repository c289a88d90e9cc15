"""The benchmark data travels with the repository and is checked against its manifest on every read.

- the repository's data/ is the default, small, fully listed in data/MANIFEST.tsv, and every benchmark
  config reads only listed files;
- a changed, unlisted or unmanifested file is refused with a message naming the file and the fix;
- the grid's benchmark version carries the data files' sha256 prefixes, so a changed data file moves
  the shard ids (and an unchanged copy elsewhere does not).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from jobs.grid.plan import plan_grid
from streamgen.benchmarks import BenchmarkDataError, load_benchmark
from streamgen.benchmarks.__main__ import main
from streamgen.benchmarks.data_manifest import (
    MANIFEST_NAME,
    data_files,
    data_version,
    read_manifest,
    verify_directory,
)
from streamgen.config import REPO_ROOT, available, benchmark_config, default_data_dir, grid_config

DATA = REPO_ROOT / "data"
MiB = 1024 * 1024
SANITIZED = "mbpp/sanitized-mbpp.json"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(tmp_path: Path, *folders: str) -> Path:
    """The manifest and the named folders of the repository's data/, copied under tmp_path."""
    out = tmp_path / "data"
    out.mkdir()
    shutil.copy2(DATA / MANIFEST_NAME, out / MANIFEST_NAME)
    for f in folders:
        shutil.copytree(DATA / f, out / f)
    return out


def _set_manifest_sha(data_dir: Path, relative: str, sha: str) -> None:
    path = data_dir / MANIFEST_NAME
    lines = path.read_text(encoding="utf-8").splitlines()
    fixed = ["\t".join([*c[:4], sha, *c[5:]]) if (c := line.split("\t"))[1] == relative else line for line in lines]
    assert fixed != lines, f"{relative} not in the manifest"
    path.write_text("\n".join(fixed) + "\n", encoding="utf-8")


def test_repository_data_is_the_default_small_and_fully_listed() -> None:
    assert default_data_dir() == DATA
    assert verify_directory(DATA) == []
    manifest = read_manifest(DATA)
    sizes = {rel: (DATA / rel).stat().st_size for rel in manifest}
    assert max(sizes.values()) < 5 * MiB and sum(sizes.values()) < 10 * MiB, sizes
    for entry in manifest.values():
        assert entry.license and entry.upstream, entry
        assert (DATA / entry.file.split("/")[0] / "SOURCE.md").is_file(), entry.file
    read = {rel for name in available("benchmarks") for rel in data_files(benchmark_config(name))}
    assert read <= set(manifest), read - set(manifest)
    assert "train/mbpp_train.jsonl" in manifest


def test_a_changed_data_file_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    data_dir = _copy(tmp_path, "mbpp")
    bench = load_benchmark(benchmark_config("mbpp-sanitized"))
    assert len(bench.examples(data_dir)) == 427  # the unchanged copy loads
    with (data_dir / SANITIZED).open("a", encoding="utf-8") as fh:
        fh.write("\n")  # still valid JSON: only the manifest can tell
    new_sha = _sha(data_dir / SANITIZED)
    with pytest.raises(BenchmarkDataError) as info:
        bench.examples(data_dir)
    message = str(info.value)
    for needle in (SANITIZED, new_sha, read_manifest(DATA)[SANITIZED].sha256, "git checkout -- data/" + SANITIZED):
        assert needle in message, (needle, message)
    assert main(["verify", "--data-dir", str(data_dir)]) == 1


def test_unlisted_file_and_missing_manifest_are_refused(tmp_path: Path) -> None:
    data_dir = _copy(tmp_path, "humaneval")
    manifest = data_dir / MANIFEST_NAME
    lines = manifest.read_text(encoding="utf-8").splitlines()
    manifest.write_text("\n".join(x for x in lines if "HumanEval.jsonl.gz" not in x) + "\n", encoding="utf-8")
    bench = load_benchmark(benchmark_config("humaneval"))
    with pytest.raises(BenchmarkDataError, match="humaneval/HumanEval.jsonl.gz is not listed"):
        bench.examples(data_dir)
    assert any("does not list" in p for p in verify_directory(data_dir))
    manifest.unlink()
    with pytest.raises(BenchmarkDataError, match="has no MANIFEST.tsv"):
        bench.examples(data_dir)


def test_benchmark_version_follows_the_data_files_and_moves_shard_ids(tmp_path: Path) -> None:
    cfg = benchmark_config("mbpp-sanitized")
    assert data_version(cfg, DATA) == f"{cfg.version}+{_sha(DATA / SANITIZED)[:8]}"
    chat = benchmark_config("chat")
    files = (chat.data_file, chat.options["answers_file"])
    assert data_files(chat) == files
    assert data_version(chat, DATA) == f"{chat.version}+" + ".".join(_sha(DATA / f)[:8] for f in files)

    overrides = ["models=[tiny-llama]", "benchmarks=[mbpp-sanitized]", "limit=2", "shard_size=2"]
    plan = plan_grid(grid_config("smoke", overrides))
    assert {s.cell.benchmark.version for s in plan.shards} == {data_version(cfg, DATA)}
    data_dir = _copy(tmp_path, "mbpp")
    same = plan_grid(grid_config("smoke", [*overrides, f"data_dir={data_dir}"]))
    assert [s.shard_id for s in same.shards] == [s.shard_id for s in plan.shards]  # the folder is not in the id

    text = (data_dir / SANITIZED).read_text(encoding="utf-8")
    (data_dir / SANITIZED).write_text(text.replace('"prompt": "', '"prompt": "Please: ', 1), encoding="utf-8")
    _set_manifest_sha(data_dir, SANITIZED, _sha(data_dir / SANITIZED))  # a deliberate, recorded change
    changed = plan_grid(grid_config("smoke", [*overrides, f"data_dir={data_dir}"]))
    assert changed.examples["mbpp-sanitized"] != plan.examples["mbpp-sanitized"]  # the edit reached the rows
    assert {s.cell.benchmark.version for s in changed.shards} == {f"{cfg.version}+{_sha(data_dir / SANITIZED)[:8]}"}
    assert not {s.shard_id for s in changed.shards} & {s.shard_id for s in plan.shards}
