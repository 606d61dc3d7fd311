"""Tiny random models that carry a model family's tool-calling chat format,
for tests of tools (issue 23). The real template files come with the models
from the Hub, which tests cannot reach; these templates are written here to
the families' documented formats:

- QWEN25_TOOLS: Qwen2.5-Instruct's (Hermes-style): the tools listed as JSON in
  the system turn inside <tools></tools>; a call is
  <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>; a result comes
  back in a user turn inside <tool_response></tool_response>.
- QWEN3_TOOLS: Qwen3's: the same tool format, and the model may think first
  (<think>...</think>).
- LLAMA31_TOOLS: Llama 3.1's: the tools as JSON in the first user turn, a call
  as bare JSON {"name": ..., "parameters": ...}, results from role "ipython".
  mlx-lm has no parser for it, so Tandem refuses tools for it, saying why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx

from tests.tiny_model import build_tiny_llama

_QWEN_TOOLS_HEADER = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
    "{% else %}You are a helpful assistant.{% endif %}\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n"
    "{{ messages[0]['content'] }}<|im_end|>\n{% endif %}\n"
)
_QWEN_TOOLS_BODY = (
    "{% for message in messages %}"
    "{% if message.role == 'user' or (message.role == 'system' and not loop.first) "
    "or (message.role == 'assistant' and not message.tool_calls) %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant"
    "{% if message.content %}\n{{ message.content }}{% endif %}"
    "{% for tool_call in message.tool_calls %}"
    "{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}"
    "{% endif %}\n<tool_call>\n"
    '{"name": "{{ tool_call.name }}", "arguments": {{ tool_call.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN25_TOOLS = _QWEN_TOOLS_HEADER + _QWEN_TOOLS_BODY
QWEN3_TOOLS = QWEN25_TOOLS.replace(
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}")
LLAMA31_TOOLS = (
    "{% for message in messages %}"
    "{% if loop.first and tools %}<|im_start|>user\nGiven the following functions, please "
    "respond with a JSON for a function call with its proper arguments that best answers "
    'the given prompt.\n\nRespond in the format {"name": function name, "parameters": '
    "dictionary of argument name and its value}.\n\n{% for t in tools %}{{ t | tojson }}\n\n"
    "{% endfor %}{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'ipython' or message.role == 'tool' %}<|im_start|>ipython\n"
    "{{ message.content }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
               "<think>", "</think>"]


def build_tool_model(path: Path, template: str, seed: int = 0,
                     max_positions: int = 4096, corpus: Sequence[str] = (),
                     vocab: int = 400) -> Path:
    """A tiny random llama whose tokenizer has the family's tool markers (added
    tokens, as in Qwen's vocabulary) and whose chat template is `template`;
    `max_positions`: its context (a coding agent's prompts want >= 32k);
    `corpus`, `vocab`: its tokenizer's (tests/tiny_model.py build_tokenizer)."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    build_tiny_llama(path, seed=seed, max_positions=max_positions,  # tool prompts are long
                     corpus=corpus, vocab=vocab)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False)
                          for t in TOOL_TOKENS])
    tokenizer.chat_template = template
    tokenizer.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    weights = mx.load(str(path / "model.safetensors"))
    embed = weights["model.embed_tokens.weight"]
    extra = len(tokenizer) - embed.shape[0]
    if extra > 0:
        mx.random.seed(seed + 1)
        weights["model.embed_tokens.weight"] = mx.concatenate(
            [embed, mx.random.normal((extra, embed.shape[1])) * 0.5])
        config["vocab_size"] = len(tokenizer)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path
