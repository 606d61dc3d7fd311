"""`tandem generate`'s prompt: from the argument, stdin (`-`) or --file, as
UTF-8 text; anything else a clear `PromptError` (rc 2) before the engine
loads."""

from __future__ import annotations

import os
import sys


class PromptError(Exception):
    """A prompt that cannot be read or is not text: printed as is, rc 2."""


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PromptError(f"{what} is not valid UTF-8 text "
                          f"(byte 0x{data[e.start]:02x} at position {e.start})") from None


def argument_text(text: str, what: str) -> str:
    """`text` from argv: Python turns undecodable bytes into lone surrogates,
    which the tokenizer rejects with an obscure message; report the byte."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _decode(os.fsencode(text), what)
    return text


def read_prompt(args) -> str:
    """The prompt from the argument, stdin (`-`) or --file."""
    if (args.prompt is None) == (args.file is None):
        raise PromptError("give the prompt as an argument, '-' to read stdin, or --file PATH "
                          "(exactly one of them)")
    if args.file is not None:
        try:
            with open(args.file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise PromptError(f"cannot read {args.file}: {e.strerror or e}") from None
        return _decode(data, "the prompt")
    if args.prompt == "-":
        return _decode(sys.stdin.buffer.read(), "the prompt")
    return argument_text(args.prompt, "the prompt")
