"""Running the sim: `serve()` for the CLI, `SimServer` for tests and demos."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from agent_jobs.core.clock import Clock
from agent_jobs.sim import statefile, worlds
from agent_jobs.sim.admin import SimAdmin
from agent_jobs.sim.app import SimApp
from agent_jobs.sim.handler import SimHTTPServer
from agent_jobs.sim.models import Json, WorldData
from agent_jobs.sim.world import World

DRAIN_TIMEOUT_S = 5.0


def build_app(
    *,
    state_file: str | os.PathLike[str] | None = None,
    world: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> SimApp:
    """An app whose world is the state file's, else `world`, else empty.

    A state file that exists wins over `world`: it is the ledger of a previous run, and seeding over
    it would erase refunds that were really made. A state file that cannot be read is an error.
    """
    path = Path(state_file) if state_file is not None else None
    data = statefile.read(path) if path is not None else None
    fresh = data is None
    if data is None:
        data = WorldData.model_validate(dict(world)) if world is not None else WorldData()
    w = World(data, clock=clock, state_file=path)
    if fresh and path is not None:
        w.load(data)  # a restart right away must find the seeded world, not an empty one
    return SimApp(w, clock=clock)


def _make_server(host: str, port: int, app: SimApp, *, access_log: bool) -> SimHTTPServer:
    if ":" in host:
        # An IPv6 literal needs an IPv6 socket; ThreadingHTTPServer defaults to IPv4.
        class _V6(SimHTTPServer):
            address_family = socket.AF_INET6

        return _V6((host, port), app, access_log=access_log)
    return SimHTTPServer((host, port), app, access_log=access_log)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    host: str,
    port: int,
    state_file: str | None = None,
    *,
    world: Mapping[str, Any] | str | None = None,
    access_log: bool = False,
) -> None:
    """Serve the sim until SIGINT or SIGTERM. Blocking.

    `world` is a world (e.g. `worlds.incident_8472()`), the name of one in `worlds.BUILDERS`, or
    None for `worlds.DEFAULT_WORLD`: the incident of order 8472, so the README's refund example
    works against a sim started with no arguments (`"empty"` starts with no orders). With
    `state_file`, the world is read from it at start and rewritten atomically after every
    mutation; `world` only seeds a state file that does not exist yet.

    Prints two lines, `sim listening on http://HOST:PORT` (the real port when `port` is 0), then
    `sim world: ...` saying what it serves, then serves. `access_log` writes one line per
    request to stderr.
    """
    name = worlds.DEFAULT_WORLD if world is None else world
    seed = worlds.build(name) if isinstance(name, str) else name
    label = name if isinstance(name, str) else "given"
    if state_file is not None and Path(state_file).exists():
        label = "from the state file (the seed world is not used)"
    elif name == worlds.DEFAULT_WORLD and world is None:
        label = f"{name} (the default; --world empty for none)"
    app = build_app(state_file=state_file, world=seed)
    httpd = _make_server(host, port, app, access_log=access_log)

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever() to return, which runs in this very thread: ask
        # from another thread or it deadlocks.
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    # Installed before the lines are printed: whoever reads them may signal at once.
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, stop)
    print(f"sim listening on {_url(host, httpd.server_address[1])}", flush=True)
    served = worlds.describe(app.world.dump().model_dump(mode="json"))
    print(f"sim world: {label}: {served}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        app.stopping.set()
        app.log.wait_idle(DRAIN_TIMEOUT_S)
        httpd.server_close()


class SimServer:
    """The sim on 127.0.0.1 (a free port by default) in a daemon thread; a context manager.

    `world` seeds it (see `build_app` for how it meets `state_file`); `clock` fixes `created_at`.
    """

    def __init__(
        self,
        world: Mapping[str, Any] | None = None,
        *,
        state_file: str | os.PathLike[str] | None = None,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.app = build_app(state_file=state_file, world=world, clock=clock)
        self._host = host
        self._port = port
        self._httpd: SimHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> SimServer:
        if self._httpd is not None:
            raise RuntimeError("SimServer already started")
        self.app.stopping.clear()
        self._httpd = _make_server(self._host, self._port, self.app, access_log=False)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"sim-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, cut `delay` faults short, let in-flight requests finish, close."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        self.app.stopping.set()
        self.app.log.wait_idle(DRAIN_TIMEOUT_S)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("SimServer is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """e.g. `http://127.0.0.1:54321`, no trailing slash."""
        return _url(self._host, self.port)

    @property
    def admin(self) -> SimAdmin:
        """A client for the admin routes of this server."""
        return SimAdmin(self.base_url)

    @property
    def world(self) -> World:
        """Direct access to the state, for assertions that need no HTTP round trip."""
        return self.app.world

    def wait_for_requests(
        self, count: int, operation: str | None = None, timeout: float = 10.0
    ) -> list[Json]:
        """Block until `count` requests (for `operation`) have completed; return the log entries.

        This is how a test waits for a `delay`-faulted request to land without sleeping.
        Raises TimeoutError if they have not completed within `timeout` seconds.
        """
        if not self.app.log.wait_for(count, operation, timeout):
            raise TimeoutError(f"fewer than {count} {operation or 'requests'} within {timeout}s")
        return self.app.log.entries(operation)
