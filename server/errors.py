"""Every answer that is not a success is an OpenAI-style JSON error:
`{"error": {"message", "type", "param", "code"}}` with a fitting status."""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

log = logging.getLogger("tandem.server")


class APIError(Exception):
    """A request Tandem will not serve, and why (an OpenAI-style error)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = (
            status, message, kind, param, code)
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.kind, self.param, self.code,
                              self.headers)


def error_response(status: int, message: str, kind: str = "invalid_request_error",
                   param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Starlette's own refusals (no such route, wrong method) in OpenAI's shape."""
    return error_response(exc.status_code, exc.detail or "Not found.",
                          code="not_found" if exc.status_code == 404 else None,
                          headers=getattr(exc, "headers", None))


async def server_fault(request: Request, exc: Exception) -> JSONResponse:
    """A bug of ours: a JSON 500 for the caller (no traceback, no local detail);
    the traceback goes to the log."""
    log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "Internal server error.", kind="server_error")
