"""A worker "host" in a network namespace of a test's own, where the machine allows it (root and
iproute2): one veth pair per service it reaches, so a partition is a link taken down (packets
dropped, nothing reset: what a cable pulled or a firewall does), not a proxy closing sockets.

Every namespace and veth is named after this process (`aj<pid><host><service>`), so tests on
the same machine never share one, and removed by name on close.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


# Set (to anything) to run a namespace test's fallback on a machine that has namespaces.
FORCE_ENV = "AGENT_JOBS_TEST_NO_NETNS"


def netns_refused() -> str | None:
    """Why namespaces cannot be used here (None: they can): tried, not guessed."""
    if os.environ.get(FORCE_ENV):
        return f"{FORCE_ENV} is set"
    if shutil.which("ip") is None:
        return "no iproute2 (`ip`)"
    if os.geteuid() != 0:
        return "not root"
    probe = f"ajprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` refused: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Netns:
    """Namespace `aj<pid><tag>`; `link(service)` gives the root side's address of a new veth
    pair, which a proxy in the root namespace listens on for that service."""

    tag: str
    index: int
    name: str = ""
    links: dict[str, str] = field(default_factory=dict)  # service -> root-side veth

    def __post_init__(self) -> None:
        self.name = f"aj{os.getpid() % 1_000_000}{self.tag}"
        _ip("netns", "add", self.name)
        _ip("-n", self.name, "link", "set", "lo", "up")

    @property
    def exec_prefix(self) -> list[str]:
        """Run a command inside the namespace (`ip netns exec` execs it: the pid is its own)."""
        return ["ip", "netns", "exec", self.name]

    def link(self, service: str) -> tuple[str, str]:
        """A veth pair for `service` (one letter): the root side's and the namespace side's
        addresses, a /30 of their own in 198.18.0.0/15 (reserved for benchmarking networks:
        no real network a developer's machine routes to)."""
        n = (os.getpid() % 32) * 8 + self.index * 4 + len(self.links)
        net = f"198.18.{n}"
        outside, inside = f"{self.name}{service}", f"{self.name}{service}n"
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        self.links[service] = outside
        _ip("link", "set", inside, "netns", self.name)
        _ip("addr", "add", f"{net}.1/30", "dev", outside)
        _ip("link", "set", outside, "up")
        _ip("-n", self.name, "addr", "add", f"{net}.2/30", "dev", inside)
        _ip("-n", self.name, "link", "set", inside, "up")
        return f"{net}.1", f"{net}.2"

    def reaches(self, host: str, port: int) -> bool:
        """Whether a TCP connection from inside the namespace to `host:port` opens within 1 s."""
        probe = f"exec 3<>/dev/tcp/{host}/{port}"
        cmd = [*self.exec_prefix, "timeout", "1", "bash", "-c", probe]
        return subprocess.run(cmd, capture_output=True, check=False, timeout=10).returncode == 0

    def down(self, service: str) -> None:
        _ip("link", "set", self.links[service], "down")

    def up(self, service: str) -> None:
        _ip("link", "set", self.links[service], "up")

    def close(self) -> None:
        """Removed by name, whatever state they are in (the namespace takes its veth ends)."""
        for outside in self.links.values():
            _ip("link", "del", outside, check=False)
        _ip("netns", "del", self.name, check=False)
