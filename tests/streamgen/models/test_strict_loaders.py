"""Loaders that refuse what the pre-flight missed (issue 52): a weight renamed in a checkpoint folder,
loaded by each family's own loader called directly (no pre-flight), is an error naming the checkpoint,
never a printed report followed by a randomly initialised weight. The healthy folder loads first, so
each test shows the loader reached the weights; the renamed one then fails on exactly that weight.
(A multimodal Gemma-3's text loader: tests/streamgen/models/test_gemma3_text.py, a missing language tensor.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from streamgen.config import ModelConfig
from streamgen.families.registry import FAMILIES
from streamgen.models.tokenizers import tiny_tokenizer
from streamgen.models.weights import ModelLoadError, tiny_model


def rename(folder: Path, old: str, new: str, *, file: str = "model.safetensors") -> None:
    """Rename tensor ``old`` of ``folder/file`` to ``new`` (the rest unchanged)."""
    sd = load_file(str(folder / file))
    sd[new] = sd.pop(old)
    save_file(sd, str(folder / file), metadata={"format": "pt"})


def saved(folder: Path, model: torch.nn.Module) -> Path:
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    assert (folder / "model.safetensors").is_file()  # one file, as the renames below assume
    return folder


def local(name: str, family: str, folder: Path, **decoding: object) -> ModelConfig:
    return ModelConfig(name=name, family=family, source="local", path=str(folder), dtype="float32",
                       decoding=dict(decoding))


@pytest.mark.parametrize(("family", "arch"), [("autoregressive", "llama"), ("refusion", "qwen3")])
def test_a_transformers_family_refuses_a_renamed_weight(tmp_path: Path, family: str, arch: str) -> None:
    folder = saved(tmp_path / arch, tiny_model(arch, seed=1))
    mask = {"mask_token_id": len(tiny_tokenizer()) - 1} if family == "refusion" else {}
    cfg = local(f"tiny-{arch}", family, folder, **mask)
    assert FAMILIES[family].load(cfg, "cpu").model is not None  # the healthy folder loads
    rename(folder, "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.upproj.weight")
    with pytest.raises(ModelLoadError) as err:
        FAMILIES[family].load(cfg, "cpu")
    (line,) = err.value.problems
    assert line.startswith(f"model tiny-{arch}: the checkpoint {folder} does not fit")
    assert "1 missing (model.layers.0.mlp.up_proj.weight)" in line
    assert "1 unexpected (model.layers.0.mlp.upproj.weight)" in line


def test_a_transformers_family_refuses_a_weight_of_another_shape(tmp_path: Path) -> None:
    folder = saved(tmp_path / "llama", tiny_model("llama", seed=1))
    sd = load_file(str(folder / "model.safetensors"))
    sd["model.layers.1.mlp.down_proj.weight"] = sd["model.layers.1.mlp.down_proj.weight"][:, :-1].contiguous()
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelLoadError) as err:
        FAMILIES["autoregressive"].load(local("tiny-llama", "autoregressive", folder), "cpu")
    assert f"the checkpoint {folder} does not fit" in str(err.value) and "of another shape" in str(err.value)


def bidir_folder(folder: Path, arch: str) -> tuple[Path, str, str]:
    """A LLaDA or Dream checkpoint folder (its own parameter names) and one of its weight names."""
    from streamgen.families.bidirectional.model import tiny_spec
    from tests.streamgen.families.test_bidir_models import VOCAB, _dream_checkpoint, _llada_checkpoint
    from tests.streamgen.models.test_checkpoint_io import LLADA_CONFIG

    folder.mkdir()
    tiny_tokenizer().save_pretrained(folder)
    if arch == "llada":
        spec = tiny_spec("llada", VOCAB, hidden_size=32, intermediate_size=48, rope_theta=10000.0)
        sd, raw, name = _llada_checkpoint(spec, torch.Generator().manual_seed(1)), LLADA_CONFIG, \
            "model.transformer.blocks.0.q_proj.weight"
    else:
        raw = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 48, "vocab_size": VOCAB, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
               "max_position_embeddings": 256, "mask_token_id": 49, "eos_token_id": 48}
        spec = tiny_spec("dream", VOCAB, hidden_size=32, intermediate_size=48, num_kv_heads=2)
        sd, name = _dream_checkpoint(spec, torch.Generator().manual_seed(1)), "model.layers.0.self_attn.q_proj.weight"
    (folder / "config.json").write_text(json.dumps(raw))
    save_file(sd, str(folder / "model.safetensors"))
    return folder, name, name.replace("q_proj", "q_prj")


@pytest.mark.parametrize("arch", ["llada", "dream"])
def test_the_bidirectional_family_refuses_a_renamed_weight(tmp_path: Path, arch: str) -> None:
    folder, old, new = bidir_folder(tmp_path / arch, arch)
    cfg = local(f"tiny-{arch}", "bidirectional", folder, style=arch, mask_token_id=49)
    assert FAMILIES["bidirectional"].load(cfg, "cpu").model is not None
    rename(folder, old, new)
    with pytest.raises(ModelLoadError) as err:
        FAMILIES["bidirectional"].load(cfg, "cpu")
    (line,) = err.value.problems
    assert line.startswith(f"model tiny-{arch}: {folder}: ") and new in line


def test_the_bidirectional_family_refuses_an_int8_weight(tmp_path: Path) -> None:
    """The in-project reader casts float tensors only: an int8 one is refused, not run as is."""
    folder, name, _ = bidir_folder(tmp_path / "llada", "llada")
    sd = load_file(str(folder / "model.safetensors"))
    sd[name] = sd[name].to(torch.int8)
    save_file(sd, str(folder / "model.safetensors"))
    with pytest.raises(ModelLoadError) as err:
        FAMILIES["bidirectional"].load(local("tiny-llada", "bidirectional", folder, style="llada",
                                             mask_token_id=49), "cpu")
    assert f"tensor {name} is torch.int8, not a float dtype" in str(err.value)


def test_diffusion_gemma_refuses_a_renamed_weight(tmp_path: Path) -> None:
    from streamgen.families.diffusion_gemma.plugin import tiny_diffusion_gemma

    tok = tiny_tokenizer()
    model = tiny_diffusion_gemma(1, len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    folder = saved(tmp_path / "dgemma", model)
    cfg = local("tiny-dgemma", "diffusion_gemma", folder)
    assert FAMILIES["diffusion_gemma"].load(cfg, "cpu").model is not None
    old = "model.decoder.layers.0.mlp.up_proj.weight"
    assert old in load_file(str(folder / "model.safetensors"))
    rename(folder, old, old.replace("up_proj", "upproj"))
    with pytest.raises(ModelLoadError) as err:
        FAMILIES["diffusion_gemma"].load(cfg, "cpu")
    (line,) = err.value.problems
    # The encoder and the decoder share their weights and the file holds each once: the renamed tensor
    # leaves both ends without it.
    assert f"the checkpoint {folder} does not fit" in line
    assert f"2 missing ({old}, model.encoder.language_model.layers.0.mlp.up_proj.weight)" in line
    assert f"1 unexpected ({old.replace('up_proj', 'upproj')})" in line


def test_a_decoder_is_not_built_over_a_tokenizer_without_a_chat_template(tmp_path: Path) -> None:
    """What the pre-flight refuses is refused again where the decoder is built (a loader called directly)."""
    from streamgen.config import ConfigError
    from streamgen.families.registry import load_decoder

    folder = saved(tmp_path / "llama", tiny_model("llama", seed=1))
    meta = json.loads((folder / "tokenizer_config.json").read_text())
    meta.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(meta))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    cfg = local("tiny-llama", "autoregressive", folder)
    with pytest.raises(ConfigError, match="has no chat template"):
        load_decoder(cfg)
    base = load_decoder(ModelConfig(**{**cfg.__dict__, "chat_template_required": False}))
    assert base.render([{"role": "user", "content": "hi"}])  # a base model: the plain transcript
