"""A TCP proxy that can be cut and restored: a service outage the bench (or a test) owns.

`agent-jobs bench outage` stops Postgres for its workers without touching the server others
use: the workers reach the database through this proxy, and cutting it drops every connection
(reset) and refuses new ones, as a server that stopped does; restoring it listens again on the
same port, as the server coming back.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType

ACCEPT_POLL_S = 0.05  # how soon the accept loop notices a cut


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class CuttableProxy:
    """Forwards `listen_host:port` to `target`, one pair of pump threads per connection."""

    def __init__(self, target: tuple[str, int], *, listen_host: str = "127.0.0.1") -> None:
        self.target = target
        self.host = listen_host
        self.port = free_port(listen_host)
        self.cuts = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()

    def __enter__(self) -> CuttableProxy:
        self.restore()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cut()

    @property
    def up(self) -> bool:
        return self._listener is not None

    def restore(self) -> None:
        """Listen again (on the same port); a no-op when up."""
        with self._lock:
            if self._listener is not None:
                return
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(256)
            sock.settimeout(ACCEPT_POLL_S)
            self._listener = sock
        threading.Thread(
            target=self._accept, args=(sock,), name="proxy-accept", daemon=True
        ).start()

    def cut(self) -> None:
        """Refuse new connections and reset every open one; a no-op when already cut."""
        with self._lock:
            listener, self._listener = self._listener, None
            dropped, self._open = self._open, set()
        if listener is None:
            return
        self.cuts += 1
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # stops listening now, not when accept returns
        listener.close()
        for sock in dropped:
            with contextlib.suppress(OSError):
                # Linger 0: the peer gets a reset now, not an orderly close after its last send.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)  # wakes its pump thread's recv
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by a cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._open.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
