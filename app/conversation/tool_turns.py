"""A chat's messages as a model takes them, tool turns included (issue 36).

With `tools` (the model has a tool-call format) an answer's calls go as
OpenAI's `tool_calls` and each result as a `tool` message; a call left
without a result (the chat was closed or the app quit while it waited)
gets one saying it did not run, so the template always sees each call
answered. Without tools, the calls are written into the answer's text and
the results into one user turn, so the roles still alternate. No Qt."""

from __future__ import annotations

import json

NO_RESULT = "No result: the call did not run (the chat was closed while it waited)."


def prompt_messages(messages: list[dict], system: str = "", tools: bool = False) -> list[dict]:
    out = [{"role": "system", "content": system}] if system else []
    waiting: list[dict] = []  # the last answer's calls not answered yet

    def settle() -> None:
        for call in waiting:
            out.append({"role": "tool", "tool_call_id": call.get("id", ""),
                        "content": NO_RESULT})
        waiting.clear()

    for m in messages:
        if m["role"] == "tool":
            call = m.get("tool") or {}
            if call.get("status") in ("asking", "running"):
                continue  # not answered yet
            if tools:
                waiting[:] = [c for c in waiting if c.get("id") != call.get("id")]
                out.append({"role": "tool", "tool_call_id": call.get("id", ""),
                            "content": m["content"]})
            else:
                _flat_result(out, f"[Result of {call.get('name', '?')}]\n{m['content']}")
            continue
        if tools:
            settle()
        calls = (m.get("tool") or {}).get("calls") if m["role"] == "assistant" else None
        if calls and tools:
            out.append({"role": "assistant", "content": m["content"], "tool_calls": [
                {"id": c.get("id", ""), "type": "function",
                 "function": {"name": c.get("name", ""), "arguments": c.get("arguments")}}
                for c in calls]})
            waiting.extend(calls)
        elif calls:
            said = [f"[Called {c.get('name', '?')}({json.dumps(c.get('arguments'))})]"
                    for c in calls]
            out.append({"role": "assistant",
                        "content": "\n".join([m["content"]] * bool(m["content"]) + said)})
        elif m["role"] == "user" and out and out[-1].get("flat") and not m.get("images"):
            out[-1]["content"] += "\n\n" + m["content"]  # after results
        elif m["role"] == "user" and m.get("images"):  # made into image parts when sent
            out.append({"role": "user", "content": m["content"], "images": m["images"]})
        elif m["content"] or m["role"] == "user":  # an answer cut before its first token
            out.append({"role": m["role"], "content": m["content"]})
    if tools and waiting and not _asking(messages):
        settle()
    for message in out:
        message.pop("flat", None)
    return out


def _flat_result(out: list[dict], text: str) -> None:
    """Results in one user turn, so that roles still alternate."""
    if out and out[-1].get("flat"):
        out[-1]["content"] += "\n\n" + text
    else:
        out.append({"role": "user", "content": text, "flat": True})


def _asking(messages: list[dict]) -> bool:
    """A call at the end still waits (asked or running): not settled yet."""
    return any((m.get("tool") or {}).get("status") in ("asking", "running")
               for m in messages[-64:] if m["role"] == "tool")
