"""Where a hub checkpoint lies on this machine: the Hugging Face cache as huggingface_hub finds it.

:func:`hub_cache_dir` follows ``huggingface_hub.constants`` (``HF_HUB_CACHE``, else the legacy
``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
``~/.cache/huggingface/hub``; ``~`` and ``$VAR`` expanded as it expands them). Those constants are frozen
when huggingface_hub is first imported, so the rule is applied here to the environment of each call
(a dry run, a test or a job's head node sets it later); ``tests/jobs/grid/test_checkpoint_damage.py`` holds the two
equal in fresh processes, so a change in huggingface_hub's rule shows up as a failing test.

:func:`find_snapshot` resolves a revision through ``refs/<rev>`` to ``snapshots/<commit>/`` without the
network; a snapshot folder that exists is returned even when files are missing from it, so the
pre-flight can say which file is missing rather than that the checkpoint is not cached.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from streamgen.config import ModelConfig

# Gated on the hub (licence to accept, token to set): the model cards of meta-llama/* ("You need to
# agree to share your contact information to access this model") and google/gemma-* ("Acknowledge
# license"); see docs/cluster.md.
GATED_PREFIXES = ("meta-llama/", "google/gemma-")
DOWNLOAD_CLI = "hf download"  # huggingface_hub's CLI, installed with it (it ships no huggingface-cli)


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint folder on disk; ``commit`` is the hub snapshot's hash (None for a local folder)."""

    folder: Path
    commit: str | None


def _expanded(value: str) -> str:
    return os.path.expandvars(os.path.expanduser(value))


def local_folder(path: str) -> Path:
    """A ``source: local`` checkpoint's folder with ``~`` and ``$VAR`` expanded (transformers and the
    in-project loaders take the path as written, so the pre-flight and every loader expand it here)."""
    return Path(_expanded(path))


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache this process would read, by huggingface_hub's rule (read from the
    environment on each call)."""
    env = os.environ
    home = _expanded(env.get("HF_HOME", os.path.join(env.get("XDG_CACHE_HOME", os.path.join(
        os.path.expanduser("~"), ".cache")), "huggingface")))
    legacy = env.get("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub"))
    return Path(_expanded(env.get("HF_HUB_CACHE", legacy)))


def is_gated(repo_id: str) -> bool:
    return repo_id.startswith(GATED_PREFIXES)


def download_command(repo_id: str, revision: str | None) -> str:
    """The command that puts ``repo_id`` into the cache."""
    return f"{DOWNLOAD_CLI} {repo_id}" + (f" --revision {revision}" if revision else "")


def find_snapshot(repo_id: str, revision: str | None) -> Snapshot | None:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (a branch, tag or commit; None: main),
    or None when the cache holds no such snapshot."""
    repo = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    rev = revision or "main"
    ref = repo / "refs" / rev
    commit = ref.read_text().strip() if ref.is_file() else rev if re.fullmatch(r"[0-9a-f]{40}", rev) else None
    if commit is None or not (repo / "snapshots" / commit).is_dir():
        return None
    return Snapshot(repo / "snapshots" / commit, commit)


def missing_snapshot_line(cfg: ModelConfig) -> str:
    """The one problem line of a hub checkpoint absent from the cache: where it looked, how to get it."""
    line = (f"model {cfg.name}: {cfg.path} (revision {cfg.revision or 'main'}) is not in the Hugging Face cache "
            f"{hub_cache_dir()}; download it where the network is reachable: {download_command(cfg.path, cfg.revision)}")
    if is_gated(cfg.path):
        line += (f" (gated: accept its licence at https://huggingface.co/{cfg.path} and log in first: "
                 "hf auth login, or set HF_TOKEN)")
    return line + ("; then point HF_HOME or HF_HUB_CACHE at that cache, or set path: to a local folder "
                   "with source: local")


def fetch_again(cfg: ModelConfig) -> str:
    """How to get a checkpoint's files again: the download command for a hub id, the folder to fix for
    a local one."""
    if cfg.source == "hub":
        return f"download it again: {download_command(cfg.path, cfg.revision)}"
    return f"copy the checkpoint into {cfg.path} again (or fix path:)"
