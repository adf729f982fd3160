"""What we declare about an MCP tool source: where its server is, and what each tool does.

The server describes its tools (names, argument schemas, descriptions, annotations); it does not
get to say which of them act. Whether a tool is a read or an effect, how an effect is keyed, and
how it is reconciled are ours to declare here, and the server's annotations (`readOnlyHint`,
`destructiveHint`, ...) are never read: a server that calls its payout tool read-only must not
turn it into an unkeyed, unapproved, retried read.

Credentials are named, never written here: `secret_headers` and `secret_env` map a header or an
environment variable of the server to the *name* of a secret, resolved from the secrets mapping
the source is given at each connection. The values never enter a descriptor, a model-visible text
or a log line.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from agent_jobs.core.errors import ConfigError
from agent_jobs.tools.descriptors import NO_RETRY, RetryPolicy

# A source's name is the namespace of its tools (`orders.get_order`); kept to a plain alphabet
# because tool names travel into metrics labels, audit records and prompts.
_SOURCE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# A header a credential may travel in: a token, per RFC 9110, and none a transport owns.
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
_TRANSPORT_HEADERS = frozenset({"host", "content-length", "content-type", "mcp-session-id"})

ToolKind = Literal["read", "effect"]


def _frozen(m: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(m))


@dataclass(frozen=True)
class StdioServer:
    """A server we spawn: `command` with `args`, in `cwd`. `env` holds plain settings;
    `secret_env` maps a variable of the server's environment to the name of a secret, and
    `credential_env`, when set, names the variable that carries the executor's minted
    credential for the call. The server gets only these and the SDK's minimal environment
    (PATH, HOME, ...), never the worker's."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: Mapping[str, str] = field(default_factory=dict)
    credential_env: str | None = None
    cwd: str | None = None

    def __post_init__(self) -> None:
        if not self.command or "\x00" in self.command or any("\x00" in a for a in self.args):
            raise ConfigError("mcp stdio server: command and args must be non-empty, without NUL")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", _frozen(self.env))
        object.__setattr__(self, "secret_env", _frozen(self.secret_env))
        clash = set(self.env) & set(self.secret_env)
        if clash or (self.credential_env and self.credential_env in {*self.env, *self.secret_env}):
            raise ConfigError(f"mcp stdio server: a variable is set twice: {sorted(clash)}")


@dataclass(frozen=True)
class HttpServer:
    """A streamable-HTTP server at `url`. `headers` are plain; `secret_headers` maps a header
    to the name of a secret; `send_credential` sends the executor's minted credential for the
    call as `Authorization: Bearer ...` (as the HTTP adapter does)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    secret_headers: Mapping[str, str] = field(default_factory=dict)
    send_credential: bool = False

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"mcp http server: url must be http(s), got {self.url[:100]!r}")
        object.__setattr__(self, "headers", _frozen(self.headers))
        object.__setattr__(self, "secret_headers", _frozen(self.secret_headers))
        names = [*self.headers, *self.secret_headers]
        bad = [n for n in names if not _HEADER_NAME.match(n) or n.lower() in _TRANSPORT_HEADERS]
        lowered = [n.lower() for n in names]
        if self.send_credential:
            lowered.append("authorization")
        if bad or len(set(lowered)) != len(lowered):
            raise ConfigError(f"mcp http server: bad or repeated header names {bad or names}")


@dataclass(frozen=True)
class McpToolConfig:
    """Our declaration of one server tool (its name on the server, `tool`).

    A `read` may be retried and runs in any of its `scopes`. An `effect` is a keyed write: the
    executor derives its idempotency key from `key` (a template over the tool's arguments and
    `request_id`, `task_id`, `tenant_id`), sends it in the server argument `key_arg` (which the
    model never sees or fills), and reconciles an unknown outcome through `lookup`, a read tool
    (by its namespaced name, e.g. `orders.get_order_by_key`) that finds the effect by key.
    `description`, when set, replaces the server's.
    """

    tool: str
    kind: ToolKind
    scopes: frozenset[str]
    permission: str = "mcp-tool"
    timeout_s: float = 10.0
    version: str = "1"
    description: str | None = None
    retry: RetryPolicy = NO_RETRY
    key: str | None = None
    key_arg: str | None = None
    lookup: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", frozenset(self.scopes))
        if not _TOOL_NAME.match(self.tool):
            raise ConfigError(f"mcp tool name {self.tool[:80]!r} is not [A-Za-z0-9_-]{{1,64}}")
        if self.kind not in ("read", "effect"):
            raise ConfigError(f"mcp tool {self.tool}: kind must be read or effect")
        if not self.scopes:
            raise ConfigError(f"mcp tool {self.tool}: no step scopes")
        if self.kind == "read":
            if self.key or self.key_arg or self.lookup:
                raise ConfigError(f"mcp tool {self.tool}: a read has no key, key_arg or lookup")
            return
        if not (self.key and self.key_arg and self.lookup):
            raise ConfigError(f"mcp tool {self.tool}: an effect needs key, key_arg and lookup")
        if not _ARG_NAME.match(self.key_arg):
            raise ConfigError(f"mcp tool {self.tool}: key_arg {self.key_arg!r} is not a name")
        fields = {f for _, f, _, _ in string.Formatter().parse(self.key) if f}
        if self.key_arg in fields:
            raise ConfigError(f"mcp tool {self.tool}: the key cannot be built from itself")
        # Which fields exist (the server's required arguments, the context's) is checked when
        # the descriptor is built from the server's schema (`ToolDescriptor`).
        if not fields:
            raise ConfigError(f"mcp tool {self.tool}: the key template names no field")


@dataclass(frozen=True)
class McpSourceConfig:
    """One MCP server and the tools of it we expose. Only declared tools are exposed: the
    declarations are the allow-list, and a declared tool the server does not list is a
    configuration error when the descriptors are built."""

    name: str
    server: StdioServer | HttpServer
    tools: tuple[McpToolConfig, ...]

    def __post_init__(self) -> None:
        if not _SOURCE_NAME.match(self.name):
            raise ConfigError(f"mcp source name {self.name[:80]!r} is not [a-z][a-z0-9_]{{0,31}}")
        object.__setattr__(self, "tools", tuple(self.tools))
        names = [t.tool for t in self.tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"mcp source {self.name}: a tool is declared twice")
        reads = {self.qualified(t.tool) for t in self.tools if t.kind == "read"}
        for t in self.tools:
            # A lookup in this source must be one of its declared reads; one elsewhere is
            # checked by `ToolRegistry.check` once every source is registered.
            if t.lookup and t.lookup.startswith(f"{self.name}.") and t.lookup not in reads:
                raise ConfigError(
                    f"mcp tool {self.qualified(t.tool)}: lookup {t.lookup} is not a declared read"
                )

    def qualified(self, tool: str) -> str:
        """Our name for the server's `tool`: namespaced by the source."""
        return f"{self.name}.{tool}"

    def declared(self, tool: str) -> McpToolConfig | None:
        return next((t for t in self.tools if t.tool == tool), None)
