"""A remote lane's description and its health: plain Python, no I/O.

A remote lane is an OpenAI-compatible server (another Tandem, vLLM,
llama.cpp's server, LM Studio, Ollama) that finishes whole requests: no
steps run here and no KV crosses machines. `RemoteSpec` says where it is and
how long to wait for it; `CircuitBreaker` says whether to send it work now
(a remote that refused, timed out, cut a stream or answered garbage is down
for a back-off that doubles while it keeps failing).
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit, urlunsplit

from .errors import EngineError

MAX_CAPACITY = 64


def is_local_host(host: str) -> bool:
    """Loopback only: a LAN address is another machine, reached over a network."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class RemoteSpec:
    """An OpenAI-compatible endpoint to route to.

    `url` is the API's base (`https://host:port/v1`; '/v1' is added when the
    path is empty). `model` is the remote's model id ('' = the first one it
    lists). `serves` names the local model it serves (None: the same name as
    `model`); only a remote that serves the loaded model is routed to.
    `allow_http`: plain http to another machine, which the user confirmed
    (the API key and every prompt would cross the network readable)."""

    url: str
    model: str = ""
    name: str = "remote"
    serves: str | None = None
    capacity: int = 4  # concurrent requests to start with (learned online)
    allow_http: bool = False
    connect_s: float = 5.0  # to open a connection
    first_token_s: float = 120.0  # from sending to the first token
    stall_s: float = 30.0  # the longest silence mid-answer

    def __post_init__(self):
        parts = urlsplit(self.url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EngineError(f"A remote lane needs an http(s) address like "
                              f"https://host:8000/v1; got {self.url!r}.", "bad-argument")
        if parts.username or parts.password:
            raise EngineError("Put the API key in the key field, not in the address.",
                              "bad-argument")
        if parts.scheme == "http" and not is_local_host(parts.hostname) and not self.allow_http:
            raise EngineError(
                f"{parts.hostname} is another machine and the address is plain http: the API "
                "key and every prompt would cross the network readable. Use https, or "
                "confirm plain http for this address.", "insecure-remote")
        path = parts.path.rstrip("/") or "/v1"
        object.__setattr__(self, "url", urlunsplit((parts.scheme, parts.netloc, path, "", "")))
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise EngineError(f"A lane name is letters, digits, - and _; got {self.name!r}.",
                              "bad-argument")
        if not 1 <= self.capacity <= MAX_CAPACITY:
            raise EngineError(f"capacity must be from 1 to {MAX_CAPACITY}.", "bad-argument")
        for field in ("connect_s", "first_token_s", "stall_s"):
            value = getattr(self, field)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise EngineError(f"{field} must be a positive number of seconds.",
                                  "bad-argument")

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def serves_model(self) -> str:
        return self.serves if self.serves is not None else self.model

    def routes_for(self, local_names: set[str]) -> bool:
        """Whether it serves the loaded model (one of its names)."""
        return self.serves_model in local_names


def parse_remote(text: str, name: str = "remote", **options) -> RemoteSpec:
    """`URL[#MODEL[=LOCAL]]` (the command line's --remote) as a spec: MODEL
    is the remote's model id, LOCAL the loaded model it serves where its id
    is another name (llama-cpp-python lists its file's path): its model
    name, or "default" for the bundled model."""
    url, _, model = text.partition("#")
    model, equals, serves = model.rpartition("=") if "=" in model else (model, "", "")
    if equals and not serves.strip():
        raise EngineError(f"--remote {text!r}: name the local model after '='.", "bad-argument")
    return RemoteSpec(url, model.strip(), name=name, serves=serves.strip() or None, **options)


class CircuitBreaker:
    """Closed (send work), open (down until a back-off passes) or half-open
    (one request tries it). Each failure in a row doubles the back-off, from
    `base_s` to `max_s`; a success closes it."""

    def __init__(self, clock: Callable[[], float], base_s: float = 2.0, max_s: float = 120.0):
        self.clock = clock
        self.base_s = base_s
        self.max_s = max_s
        self.failures = 0  # in a row
        self.open_until = 0.0
        self.reason = ""  # the last failure
        self.trial = False  # a half-open trial is in flight

    @property
    def state(self) -> str:
        if not self.failures:
            return "closed"
        return "open" if self.clock() < self.open_until else "half-open"

    def available(self) -> bool:
        """Whether a new request may go there now."""
        state = self.state
        return state == "closed" or (state == "half-open" and not self.trial)

    def started(self) -> None:
        if self.state == "half-open":
            self.trial = True

    def success(self) -> None:
        self.failures, self.trial, self.reason = 0, False, ""

    def failure(self, reason: str, retry_after_s: float | None = None) -> float:
        """Mark it down; returns the back-off in seconds."""
        self.failures += 1
        self.trial = False
        self.reason = reason
        backoff = min(self.base_s * 2 ** (self.failures - 1), self.max_s)
        if retry_after_s is not None:
            backoff = min(max(backoff, retry_after_s), self.max_s)
        self.open_until = self.clock() + backoff
        return backoff

    def describe(self) -> str:
        state = self.state
        if state == "closed":
            return "up"
        if state == "open":
            left = self.open_until - self.clock()
            return f"down ({self.reason}); tried again in {left:.0f} s"
        return f"trying again after: {self.reason}"
