"""Which form of prompt a remote takes: token ids (the remote serves the
same model, so its tokens are the loaded model's: no re-tokenizing) or text.

Servers refuse ids differently: Tandem and vLLM take them; a server that
validates `prompt` as a string answers 400 or 422, and llama-cpp-python's
answers 500 with the validation error as its message (a 500 that says
nothing about `prompt` is a failure, handled as one). A lane sends ids
until one such refusal, then tries the same request once as text: if the
text is taken, the server takes text only, and this process remembers it
per server (`TEXT_ONLY`), so a lane added again (a model reloaded, the
remote re-added) sends text from its first call. The lane's probe sends its
prompt the way requests will, so the form is learned before any request:
one failed call at most, the probe's."""

from __future__ import annotations

TEXT_ONLY: set[str] = set()  # base URLs of servers that refused token-id prompts


def refused_ids(fault) -> bool:
    """Whether `fault` (a RemoteFault for a token-id prompt, before any
    text came back) may be the server refusing the ids' form: a 400 or 422,
    or a 500 whose message is a validation error about `prompt` (an
    internal error is not a refusal: a server that failed once must not be
    sent text for good)."""
    text = str(fault)
    if fault.kind == "prompt":
        return True
    lowered = text.lower()
    return (fault.kind == "http" and text.startswith("HTTP 500") and "prompt" in lowered
            and ("valid" in lowered or "type" in lowered))
