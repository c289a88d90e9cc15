"""A checkpoint's tokenizer files against its config and the model YAML: EOS, mask id, chat template.

Read without building a tokenizer (no ``tokenizers`` parse of the vocabulary): ``tokenizer_config.json``'s
``added_tokens_decoder``, ``eos_token`` and ``chat_template``, ``tokenizer.json``'s ``added_tokens``, and
the template files transformers 5 reads beside them (``chat_template.jinja``, ``chat_template.json``,
``additional_chat_templates/``). Any of these files may be damaged: each damage is a
:class:`~streamgen.models.checkpoint_files.CheckpointFileError` naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgen.config import ModelConfig
from streamgen.models.checkpoint_files import field_error, read_json

TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
TEMPLATE_DIR = "additional_chat_templates"


@dataclass(frozen=True)
class TokenizerFacts:
    """What a checkpoint's tokenizer files say: special token id → text, the EOS text, and whether a chat
    template is there."""

    added: Mapping[int, str]
    eos_token: str | None
    chat_template: bool = False

    @property
    def eos_id(self) -> int | None:
        return next((i for i, text in self.added.items() if text == self.eos_token), None)


def _added_decoder(path: Path, meta: dict[str, Any], fix: str) -> dict[int, str]:
    table = meta.get("added_tokens_decoder", {})
    if not isinstance(table, dict) or not all(isinstance(t, dict) and isinstance(t.get("content"), str)
                                              and str(i).isdigit() for i, t in table.items()):
        raise field_error(path, "added_tokens_decoder", "an object of id → {content: ...}", fix)
    return {int(i): t["content"] for i, t in table.items()}


def _added_list(path: Path, fast: dict[str, Any], fix: str) -> dict[int, str]:
    tokens = fast.get("added_tokens", [])
    if not isinstance(tokens, list) or not all(isinstance(t, dict) and isinstance(t.get("id"), int)
                                               and isinstance(t.get("content"), str) for t in tokens):
        raise field_error(path, "added_tokens", "a list of {id, content}", fix)
    return {t["id"]: t["content"] for t in tokens}


def _has_template(folder: Path, meta: dict[str, Any]) -> bool:
    in_meta = meta.get("chat_template")
    if isinstance(in_meta, (str, list)) and in_meta:
        return True
    files = [folder / name for name in TEMPLATE_FILES] + sorted((folder / TEMPLATE_DIR).glob("*.jinja"))
    return any(f.is_file() and f.stat().st_size > 0 for f in files)


def tokenizer_facts(folder: Path, fix: str) -> TokenizerFacts | None:
    """The special tokens and chat template of ``folder``'s tokenizer files (None: neither
    ``tokenizer_config.json`` nor ``tokenizer.json``)."""
    meta_path, fast_path = folder / "tokenizer_config.json", folder / "tokenizer.json"
    if not meta_path.is_file() and not fast_path.is_file():
        return None
    meta = read_json(meta_path, fix) if meta_path.is_file() else {}
    added = _added_decoder(meta_path, meta, fix)
    if fast_path.is_file():
        added.update(_added_list(fast_path, read_json(fast_path, fix), fix))
    eos = meta.get("eos_token")
    eos_text = eos.get("content") if isinstance(eos, dict) else eos
    if eos_text is not None and not isinstance(eos_text, str):
        raise field_error(meta_path, "eos_token", "a string or {content: ...}", fix)
    return TokenizerFacts(added, eos_text, _has_template(folder, meta))


def _ids(value: Any) -> set[int]:
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, (list, tuple)) else {int(value)}


def id_field(path: Path, raw: Mapping[str, Any], key: str, fix: str) -> set[int]:
    """The token ids of ``raw[key]`` (an int or a list of ints; absent: none)."""
    value = raw.get(key)
    ok = value is None or isinstance(value, int) or (isinstance(value, list) and all(isinstance(v, int) for v in value))
    if not ok or isinstance(value, bool):
        raise field_error(path, key, "a token id or a list of token ids", fix)
    return _ids(value)


def template_problems(cfg: ModelConfig, tok: TokenizerFacts) -> list[str]:
    """A model that needs a chat template (``chat_template_required``, the default) whose tokenizer has none."""
    if not cfg.chat_template_required or tok.chat_template:
        return []
    return [f"model {cfg.name}: the checkpoint's tokenizer has no chat template (no chat_template in "
            f"tokenizer_config.json, no chat_template.jinja), so its requests would be rendered as a plain "
            f"transcript; download the instruct checkpoint's tokenizer files again, or set "
            f"chat_template_required: false in configs/models/{cfg.name}.yaml for a base model"]


def token_problems(cfg: ModelConfig, config_path: Path, raw: dict[str, Any], tok: TokenizerFacts | None,
                   fix: str) -> list[str]:
    """The tokenizer's EOS against ``config.json`` / the YAML's ``eos_token_ids``; the YAML's
    ``mask_token_id`` against ``config.json`` and the token the tokenizer has at that id; the chat template."""
    text = raw.get("text_config") or raw
    if not isinstance(text, dict):
        raise field_error(config_path, "text_config", "an object", fix)
    decoding = dict(cfg.decoding)
    yaml_file = f"configs/models/{cfg.name}.yaml"
    eos_ids = id_field(config_path, text, "eos_token_id", fix) or id_field(config_path, raw, "eos_token_id", fix)
    eos_ids |= _ids(decoding.get("eos_token_ids"))
    if tok is None:
        return [f"model {cfg.name}: no tokenizer_config.json or tokenizer.json in the checkpoint; download it again"]
    p: list[str] = []
    if tok.eos_id is not None and eos_ids and tok.eos_id not in eos_ids:
        p.append(f"model {cfg.name}: the tokenizer's EOS {tok.eos_token!r} is id {tok.eos_id}, not among the "
                 f"config's / YAML's EOS ids {sorted(eos_ids)}; set decoding.eos_token_ids in {yaml_file}")
    p.extend(template_problems(cfg, tok))
    mask = decoding.get("mask_token_id")
    if mask is None:
        return p
    in_config = sorted(id_field(config_path, raw, "mask_token_id", fix) or id_field(config_path, text, "mask_token_id", fix))
    if in_config and in_config != [int(mask)]:
        p.append(f"model {cfg.name}: decoding.mask_token_id {mask} but config.json says mask_token_id "
                 f"{in_config[0] if len(in_config) == 1 else in_config}; set decoding.mask_token_id: {in_config[0]} "
                 f"in {yaml_file}")
    at_id = tok.added.get(int(mask))
    if at_id is None or "mask" not in at_id.lower():
        masks = {i: t for i, t in tok.added.items() if "mask" in t.lower()}
        p.append(f"model {cfg.name}: decoding.mask_token_id {mask} is {at_id!r} in the tokenizer, not a mask token "
                 f"(its mask tokens: {masks or 'none'}); fix decoding.mask_token_id in {yaml_file}")
    return p
