"""The MCP servers the user configured (Tools > MCP servers…), stored in the
database's settings without their secrets: an environment value of a stdio
server and a header value of an HTTP server live in the system keyring
(app/connections/keys.py), named `mcp:<server>:env:<NAME>` and
`mcp:<server>:header:<Name>`. No Qt: the dialog and the service use it.

Each server has "ask before each call" (on by default): off, its tools run
without asking in every chat. The tool loop's limits are here too: rounds
of calls per answer (default 8) and a call's time limit (default 60 s)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from toolhost.config import ConfigError, ServerSpec, parse, spec

from app.connections import keys

SETTING = "mcp_servers"
ROUNDS, CALL_S = 8, 60.0
KEPT = "<kept>"  # a secret's value shown in the dialog: "keep what the keyring has"


@dataclass(frozen=True)
class ServerEntry:
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    url: str = ""
    env_names: tuple[str, ...] = ()  # their values are in the keyring
    header_names: tuple[str, ...] = ()
    ask: bool = True  # ask before each call of its tools

    @property
    def kind(self) -> str:
        return "stdio" if self.command else "http"

    def as_json(self) -> dict:
        return {"name": self.name, "command": self.command, "args": list(self.args),
                "url": self.url, "env": list(self.env_names),
                "headers": list(self.header_names), "ask": self.ask}


@dataclass(frozen=True)
class ToolSettings:
    servers: tuple[ServerEntry, ...] = ()
    rounds: int = ROUNDS
    call_s: float = CALL_S

    def entry(self, name: str) -> ServerEntry | None:
        return next((s for s in self.servers if s.name == name), None)


def load(store) -> ToolSettings:
    """The stored settings; what cannot be read is left out (a damaged
    setting loses servers, never the app)."""
    raw = store.setting(SETTING, {}) or {}
    servers = []
    for item in raw.get("servers", []) if isinstance(raw, dict) else []:
        try:
            servers.append(_entry(item))
        except (ConfigError, TypeError, KeyError, AttributeError):
            continue
    rounds = raw.get("rounds", ROUNDS) if isinstance(raw, dict) else ROUNDS
    call_s = raw.get("call_s", CALL_S) if isinstance(raw, dict) else CALL_S
    return ToolSettings(tuple(servers),
                        rounds if isinstance(rounds, int) and 1 <= rounds <= 64 else ROUNDS,
                        float(call_s) if isinstance(call_s, (int, float)) and
                        1 <= call_s <= 3600 else CALL_S)


def _entry(item: dict) -> ServerEntry:
    strings = lambda key: tuple(x for x in item.get(key, []) if isinstance(x, str))  # noqa: E731
    entry = ServerEntry(str(item["name"]), str(item.get("command") or ""), strings("args"),
                        str(item.get("url") or ""), strings("env"), strings("headers"),
                        item.get("ask", True) is not False)
    check(entry)
    return entry


def check(entry: ServerEntry) -> ServerSpec:
    """The entry as toolhost checks a configuration (a name, a command or an
    https URL, ...); ConfigError says what is wrong."""
    body = {"command": entry.command, "args": list(entry.args)} if entry.command else \
        {"url": entry.url}
    return spec(entry.name, body)


def save(store, settings: ToolSettings, secrets: dict[tuple[str, str, str], str]) -> list[str]:
    """Store `settings`; `secrets` ((server, "env" | "header", name) -> value)
    go to the keyring (a value of KEPT keeps the one there). Secrets of
    servers, names or variables no longer configured are removed. Returns
    the secrets kept for this session only (no keyring here)."""
    old = load(store)
    session_only = []
    for (server, kind, name), value in secrets.items():
        if value != KEPT and not keys.put(secret_name(server, kind, name), value):
            session_only.append(f"{server} {name}")
    kept = {(s.name, "env", n) for s in settings.servers for n in s.env_names} | \
        {(s.name, "header", n) for s in settings.servers for n in s.header_names}
    for s in old.servers:
        for kind, names in (("env", s.env_names), ("header", s.header_names)):
            for name in names:
                if (s.name, kind, name) not in kept:
                    keys.forget(secret_name(s.name, kind, name))
    store.set_setting(SETTING, {"servers": [s.as_json() for s in settings.servers],
                                "rounds": settings.rounds, "call_s": settings.call_s})
    return session_only


def secret_name(server: str, kind: str, name: str) -> str:
    return f"mcp:{server}:{kind}:{name}"


def specs(settings: ToolSettings) -> tuple[list[ServerSpec], dict[str, str]]:
    """The servers as toolhost runs them, their secrets read from the
    keyring; and for a server missing a secret (a session-only key after a
    restart), why it is left out."""
    out, missing = [], {}
    for entry in settings.servers:
        values = {}
        for kind, names in (("env", entry.env_names), ("header", entry.header_names)):
            for name in names:
                value = keys.get(secret_name(entry.name, kind, name))
                if value is None:
                    missing[entry.name] = (f"{name} is not in the keyring any more: enter it "
                                           "again in Tools > MCP servers…")
                values[(kind, name)] = value or ""
        env = {n: values[("env", n)] for n in entry.env_names}
        headers = {n: values[("header", n)] for n in entry.header_names}
        if entry.name not in missing:
            out.append(replace(check(entry), env=env, headers=headers))
    return out, missing


def from_json(text: str) -> tuple[list[ServerEntry], dict[tuple[str, str, str], str]]:
    """Servers from an `mcpServers` JSON (LM Studio's mcp.json, Cursor's,
    Claude Desktop's) and their secrets, for `save`; ConfigError says why not."""
    entries, secrets = [], {}
    for s in parse(text):
        entries.append(ServerEntry(s.name, s.command, s.args, s.url, tuple(s.env),
                                   tuple(s.headers)))
        secrets.update({(s.name, "env", k): v for k, v in s.env.items()})
        secrets.update({(s.name, "header", k): v for k, v in s.headers.items()})
    return entries, secrets
