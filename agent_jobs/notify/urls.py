"""Which URLs a webhook may be sent to: no loopback, link-local, private or metadata address
unless an operator allowed its network (`AGENT_JOBS_WEBHOOK_ALLOW_NETWORKS`).

Checked twice: at registration (the name must resolve, and only to allowed addresses) and at
every connect, after DNS, on the address actually connected to (`sender`), so a name that
re-binds to an inside address after registration reaches nothing. A name with any forbidden
address is refused as a whole: a resolver may answer with either.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[..., Sequence[tuple[Any, ...]]]
MAX_URL_CHARS = 2048


class UnsafeUrl(ValueError):
    """A webhook URL this deployment does not send to, and why."""


@dataclass(frozen=True)
class UrlPolicy:
    allow_networks: tuple[IPNetwork, ...] = ()
    allow_http: bool = False

    @classmethod
    def of(cls, networks: Sequence[str], *, allow_http: bool) -> UrlPolicy:
        return cls(tuple(ipaddress.ip_network(n, strict=False) for n in networks), allow_http)


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent in the request line

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def parse(url: str, policy: UrlPolicy) -> Target:
    """The URL's parts, or `UnsafeUrl` for what is never sent to whatever it resolves to."""
    if len(url) > MAX_URL_CHARS:
        raise UnsafeUrl(f"longer than {MAX_URL_CHARS} characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise UnsafeUrl("contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrl(f"not a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise UnsafeUrl("the scheme must be https")
    if scheme == "http" and not policy.allow_http:
        raise UnsafeUrl("plain http is refused here (https required)")
    if parts.username is not None or parts.password is not None:
        raise UnsafeUrl("credentials in the URL are refused (the signature authenticates us)")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafeUrl("no host")
    try:
        host.encode("ascii")
    except UnicodeEncodeError:
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise UnsafeUrl("the host is not a valid name") from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme, host, port or (443 if scheme == "https" else 80), path)


def forbidden(ip: IPAddress, policy: UrlPolicy) -> str | None:
    """Why `ip` may not be reached, or None."""
    if any(ip in net for net in policy.allow_networks if net.version == ip.version):
        return None
    inner = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    if inner is not None:  # ::ffff:127.0.0.1 is 127.0.0.1
        return forbidden(inner, policy)
    if isinstance(ip, ipaddress.IPv6Address) and ip.sixtofour is not None:
        return forbidden(ip.sixtofour, policy)
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return "not a unicast address"
    if not ip.is_global:
        return "a private address"
    return None


def resolve(
    target: Target, policy: UrlPolicy, resolver: Resolver = socket.getaddrinfo
) -> list[str]:
    """Every address `target`'s host names, each allowed; `UnsafeUrl` otherwise."""
    try:
        literal: IPAddress | None = ipaddress.ip_address(target.host)
    except ValueError:
        literal = None
    if literal is not None:
        addrs = [literal]
    else:
        try:
            infos = resolver(target.host, target.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise UnsafeUrl(f"{target.host} does not resolve ({exc})") from None
        addrs = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        if not addrs:
            raise UnsafeUrl(f"{target.host} does not resolve")
    for ip in addrs:
        why = forbidden(ip, policy)
        if why is not None:
            raise UnsafeUrl(f"{target.host} resolves to {ip}, {why}")
    return [str(ip) for ip in dict.fromkeys(addrs)]


def check(url: str, policy: UrlPolicy, resolver: Resolver = socket.getaddrinfo) -> Target:
    """At registration: the URL parses, and its host resolves only to allowed addresses."""
    target = parse(url, policy)
    resolve(target, policy, resolver)
    return target
