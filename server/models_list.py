"""GET /v1/models in the caller's dialect. A request with an
`anthropic-version` header (Anthropic's SDKs; Claude Code's gateway model
discovery, CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1, which keeps only ids
beginning with "claude" or "anthropic") gets Anthropic's list: the chat
model's names and its exact aliases, `limit` and `after_id` / `before_id`
honoured. Any other gets OpenAI's: those names and the embedding model."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .aliases import listed_aliases
from .errors import APIError
from .messages import anthropic_error

EPOCH = "1970-01-01T00:00:00Z"  # Anthropic's "release date unknown"


def models_list(state, request: Request) -> Response:
    names = list(state.ids)
    aliases = listed_aliases(state.config.aliases, state.ids)
    if "anthropic-version" not in request.headers:
        embedding = getattr(getattr(state.engine, "embedder", None), "model", None)
        names += aliases + ([embedding.name] if embedding is not None else [])
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "tandem"}
            for name in names]})
    try:
        page = _page(names + aliases, request.query_params)
    except APIError as exc:
        return anthropic_error(exc)
    context = getattr(state.engine, "context_length", None)
    data = [{"type": "model", "id": name, "created_at": EPOCH, "lifecycle": "active",
             "display_name": name if name in state.ids else f"{name} ({state.ids[0]})",
             "max_input_tokens": context if isinstance(context, int) else None}
            for name in page[0]]
    return JSONResponse({"data": data, "has_more": page[1],
                         "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None})


def _page(names: list[str], query) -> tuple[list[str], bool]:
    """The names of one page (Anthropic's cursors: after_id, before_id,
    limit 1-1000, 20 if not given) and whether more follow."""
    limit = query.get("limit", "20")
    if not limit.isdigit() or not 1 <= int(limit) <= 1000:
        raise APIError(400, "limit must be an integer from 1 to 1000.", param="limit")
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None:
        names = names[names.index(after) + 1:] if after in names else []
    if before is not None:
        names = names[:names.index(before)] if before in names else []
        return names[-int(limit):], len(names) > int(limit)
    return names[:int(limit)], len(names) > int(limit)
