"""A tiny base model: the tiny llama (tests/tiny_model.py) without a chat
template, its tokenizer adding a BOS token to raw text as Llama 2's and
Mistral's do (a TemplateProcessing post-processor in tokenizer.json, the
way published base models write it)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.tiny_model import build_tiny_llama

BOS = "<|endoftext|>"


def build_base_model(path: Path) -> Path:
    build_tiny_llama(path)
    (path / "chat_template.jinja").unlink()  # transformers 5 writes the template here
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    bos_id = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == BOS)
    tokenizer["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": BOS, "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {BOS: {"id": BOS, "ids": [bos_id], "tokens": [BOS]}}}
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.update(bos_token=BOS, add_bos_token=True)
    config.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return path
