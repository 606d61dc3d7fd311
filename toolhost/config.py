"""MCP server configurations: the `mcpServers` JSON that LM Studio, Cursor
and Claude Desktop use, read and checked.

    {"mcpServers": {"files": {"command": "npx", "args": ["-y", "..."],
                              "env": {"ROOT": "/tmp"}},
                    "notes": {"url": "https://example.org/mcp",
                              "headers": {"Authorization": "Bearer ..."}}}}

A server is a command (stdio) or a URL (Streamable HTTP; https unless on this
machine, as for remote lanes). Secrets (env values, headers) are the
caller's to keep in the keyring; this module only reads them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from engine import is_local_host

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_SERVERS = 64


class ConfigError(ValueError):
    """A configuration Tandem will not use, and why."""


@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: str = ""  # stdio: the program
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""  # Streamable HTTP
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "stdio" if self.command else "http"


def parse(text: str) -> list[ServerSpec]:
    """The servers of an `mcpServers` JSON text (or of its inner object)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"Not valid JSON: {e}") from None
    if isinstance(data, dict) and "mcpServers" in data:
        data = data["mcpServers"]
    if not isinstance(data, dict):
        raise ConfigError('Expected {"mcpServers": {"name": {...}, ...}}.')
    if len(data) > MAX_SERVERS:
        raise ConfigError(f"More than {MAX_SERVERS} servers.")
    return [spec(name, entry) for name, entry in data.items()]


def spec(name: str, entry) -> ServerSpec:
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError(f"Server name {name!r}: letters, digits, _ . and -.")
    if not isinstance(entry, dict):
        raise ConfigError(f"Server {name}: an object with a command or a url.")
    command, url = entry.get("command"), entry.get("url") or entry.get("serverUrl")
    if bool(command) == bool(url):
        raise ConfigError(f"Server {name}: give either a command (stdio) or a url (HTTP).")
    if command:
        args = entry.get("args", [])
        env = entry.get("env", {})
        if not isinstance(command, str) or not (isinstance(args, list)
                                                and all(isinstance(a, str) for a in args)):
            raise ConfigError(f"Server {name}: command is text, args a list of text.")
        return ServerSpec(name, command=command, args=tuple(args), env=_strings(name, env, "env"))
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"Server {name}: url must be http(s)://host/path.")
    if parts.scheme == "http" and not is_local_host(parts.hostname):
        raise ConfigError(f"Server {name}: {parts.hostname} is another machine and the url is "
                          "plain http: its headers and every call would cross the network "
                          "readable. Use https.")
    return ServerSpec(name, url=url, headers=_strings(name, entry.get("headers", {}), "headers"))


def _strings(name: str, value, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"Server {name}: {what} maps names to text.")
    return dict(value)
