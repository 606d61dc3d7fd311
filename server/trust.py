"""Requests from web pages cannot act: a gate in front of every route.

A local server is reachable from every page the user opens. A page can send
"simple" cross-site POSTs (text/plain or form bodies, with its Origin), and
after a DNS rebinding it can read the answers (its own host name in Host).
So, before any route runs:
- Host must name this server: localhost, a loopback or any IP literal (a
  rebinding needs a host *name*), the bound host, or one of `allow_hosts`;
- a request that carries an Origin is refused unless that origin is allowed
  (`allow_origins`), and allowed ones get CORS answers (preflights too);
- a POST body must be `application/json`, which a page cannot send cross-site
  without a preflight.
Refusals are OpenAI-style JSON errors.
"""

from __future__ import annotations

import ipaddress
import secrets

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware

from .errors import error_response

LOCAL_NAMES = {"localhost"}


def host_name(host_header: str) -> str:
    """The name in a Host header, without its port (IPv6 literals unbracketed)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class RequestGate:
    """ASGI middleware: the checks above, then the app (wrapped for CORS)."""

    def __init__(self, app, bound_host: str = "127.0.0.1", allow_hosts=(), allow_origins=()):
        self.hosts = LOCAL_NAMES | {host_name(bound_host)} | {host_name(h) for h in allow_hosts}
        self.origins = {o.rstrip("/").lower() for o in allow_origins}
        self.app = CORSMiddleware(app, allow_origins=sorted(self.origins),
                                  allow_methods=["GET", "POST", "OPTIONS"],
                                  allow_headers=["authorization", "content-type", "x-api-key",
                                                 "anthropic-version", "anthropic-beta"]) \
            if self.origins else app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope):
        headers = Headers(scope=scope)
        name = host_name(headers.get("host", ""))
        if not (name in self.hosts or is_ip_literal(name)):
            return error_response(403, "This server answers requests for localhost only "
                                  "(the Host header names another site); start it with "
                                  "--allow-host to serve that name.", code="host_not_allowed")
        origin = headers.get("origin")
        if origin is not None and origin.rstrip("/").lower() not in self.origins:
            return error_response(403, "Requests from web pages are refused (Origin "
                                  "not allowed); start the server with --allow-origin to "
                                  "allow one.", code="origin_not_allowed")
        if scope["method"] == "POST":
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json":
                return error_response(415, "The body must be application/json.",
                                      param="Content-Type", code="unsupported_media_type")
        return None


def key_matches(authorization: str | None, key: str) -> bool:
    """Whether an Authorization header carries `key` (compared in constant time)."""
    given = (authorization or "").encode("utf-8", "surrogateescape")
    return secrets.compare_digest(given, f"Bearer {key}".encode("utf-8", "surrogateescape"))
