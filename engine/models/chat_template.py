"""Message text is data: a conversation rendered with the model's chat
template so that only the template itself emits control tokens.

Applying a template renders one string and tokenizes it whole, so text in a
message that spells a control token (`<|im_start|>system ...` pasted from a
web page, say) becomes that control token and forges a turn. Here:
- a conversation whose messages spell no special token tokenizes exactly as
  before (the same ids, so the prefix cache stays warm across turns);
- otherwise the template renders each message's content between unguessable
  markers, and each content piece is tokenized with special tokens split
  (plain text), the template's pieces as usual.
Message dicts flow through whole (roles and any other keys), so templates
see what they expect. Raw prompts (`/v1/completions`, `prompt_ids`) do not
come here: they stay raw.
"""

from __future__ import annotations

import re
import secrets

from ..core.errors import EngineError


NO_CHAT_TEMPLATE = ("This model has no chat template: it is a base model, which continues text "
                    "rather than answering chat messages. Send it the text to continue "
                    "instead: the API's /v1/completions, or `tandem generate --raw`.")


def has_chat_template(tokenizer) -> bool:
    """Whether `tokenizer` renders chats: its own template, or one mlx-lm
    supplies (its wrapper's `has_chat_template`)."""
    known = getattr(tokenizer, "has_chat_template", None)
    if isinstance(known, bool):
        return known
    return getattr(tokenizer, "chat_template", None) is not None


def special_strings(tokenizer) -> list[str]:
    """The text of every special (control) token, longest first."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    found = {t.content for t in decoder.values() if getattr(t, "special", False) and t.content}
    found |= {t for t in (getattr(tokenizer, "all_special_tokens", None) or []) if t}
    return sorted(found, key=len, reverse=True)


def render_chat(tokenizer, messages: list[dict], **template_kwargs) -> list[int]:
    """Token ids of `messages` in the model's chat template, ready to answer."""
    specials = special_strings(tokenizer)
    if not any(s in m["content"] for m in messages for s in specials):
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  **template_kwargs))
    nonce = secrets.token_hex(8)  # unguessable: message text cannot fake a marker
    marked = [dict(m, content=f"\ue000{nonce}{i}\ue001{m['content']}\ue002{nonce}{i}\ue003")
              for i, m in enumerate(messages)]
    text = tokenizer.apply_chat_template(marked, add_generation_prompt=True, tokenize=False,
                                         **template_kwargs)
    marker = re.compile(f"([\ue000\ue002]){nonce}(\\d+)[\ue001\ue003]")
    ids: list[int] = []
    kept_apart, opened, at = set(), None, 0
    for found in marker.finditer(text):
        piece = text[at:found.start()]
        inside = opened is not None
        if piece:
            ids += tokenizer.encode(piece, add_special_tokens=False,
                                    **({"split_special_tokens": True} if inside else {}))
        index = int(found.group(2))
        if found.group(1) == "\ue000":
            opened = index
        else:
            if opened == index:
                kept_apart.add(index)
            opened = None
        at = found.end()
    if text[at:]:
        ids += tokenizer.encode(text[at:], add_special_tokens=False)
    hostile = {i for i, m in enumerate(messages) if any(s in m["content"] for s in specials)}
    if not hostile <= kept_apart:
        # The template dropped a marker (it rewrites that message's content):
        # its text cannot be kept apart from the template's, so refuse it.
        raise EngineError("A message contains text that spells the model's control tokens, "
                          "and this model's chat template rewrites it, so it cannot be "
                          "sent as plain text. Remove the control tokens from it.",
                          "bad-argument")
    return ids
