"""A PgBouncer of a bench's (or a test's, or CI's) own: Debian's `pgbouncer` on a free port of
127.0.0.1, in transaction mode, in front of one Postgres server, configured as the README's
"Several hosts" says (`ignore_startup_parameters = options`: the statement and lock timeouts
travel as the connection's `options`; the clients run with `AGENT_JOBS_PG_PREPARE=0`).

Its `[databases]` section has only the `*` fallback, so every database of that server is
reachable through it under its own name (a test's freshly created one too) and each database
gets a pool of `pool_size` server connections. Databases are created and dropped on the server
itself, never through the pooler.

`python -m agent_jobs.bench.bouncer DIR --target-port 5432 --port N --pool-size N` only writes
the configuration (`DIR/pgbouncer.ini`) and prints its path: CI starts and stops the process.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from agent_jobs.bench.proxy import free_port
from agent_jobs.core.errors import ConfigError

# psycopg2 ships no type stubs: looked up, as the store does (store/seams.py).
pg: Any = importlib.import_module("psycopg2")


@dataclass(frozen=True)
class Pools:
    """One database's line of `SHOW POOLS`, summed over its users."""

    cl_active: int
    cl_waiting: int
    sv_active: int
    sv_idle: int
    sv_used: int
    maxwait_s: float

    @property
    def servers(self) -> int:
        """Server connections PgBouncer holds open to Postgres for this database."""
        return self.sv_active + self.sv_idle + self.sv_used


def write_config(
    where: Path, *, port: int, target_host: str, target_port: int, user: str, pool_size: int
) -> Path:
    """`where/pgbouncer.ini` (and its users file), readable by the user PgBouncer drops to when
    started as root (it refuses to run as root)."""
    where.mkdir(parents=True, exist_ok=True)
    where.chmod(0o777)
    (where / "users.txt").write_text(f'"{user}" ""\n')
    ini = where / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={target_host} port={target_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {where / 'users.txt'}\nadmin_users = {user}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
        "max_client_conn = 1000\nmax_db_connections = 0\n"
        "ignore_startup_parameters = options,extra_float_digits\n"
        f"logfile = {where / 'pgbouncer.log'}\npidfile = {where / 'pgbouncer.pid'}\n"
    )
    for path in where.iterdir():
        path.chmod(0o666)
    return ini


class PrivateBouncer:
    """`pgbouncer` in front of the server of `target_url`, started and stopped (by its pid) by
    this object: `url_for(database_url)` is a URL of that server's database through it."""

    def __init__(self, target_url: str, *, pool_size: int, logdir: Path | None = None) -> None:
        binary = shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
        )
        if binary is None:
            raise ConfigError("this needs Debian's pgbouncer (apt-get install pgbouncer)")
        self.binary = binary
        target = urlsplit(target_url)
        self.target_host = target.hostname or "127.0.0.1"
        self.target_port = target.port or 5432
        self.user = target.username or "postgres"
        self.pool_size = pool_size
        self.port = free_port()
        self.dir = logdir or Path(tempfile.mkdtemp(prefix="agent-jobs-pgbouncer-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    def url_for(self, database_url: str) -> str:
        """`database_url` with its host and port replaced by this PgBouncer's."""
        parts = urlsplit(database_url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def __enter__(self) -> PrivateBouncer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout_s: float = 15.0) -> None:
        ini = write_config(
            self.dir, port=self.port, target_host=self.target_host,
            target_port=self.target_port, user=self.user, pool_size=self.pool_size,
        )  # fmt: skip
        cmd = [self.binary, str(ini)]
        if os.geteuid() == 0:
            cmd = [self.binary, "-u", self.user, str(ini)]
        self._out = open(self.dir / "stdout.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._admin().close()
                return
            except pg.OperationalError as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.dir / "pgbouncer.log"
                    why = log.read_text()[-2000:] if log.exists() else "pgbouncer exited"
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not start: {why}") from exc
                time.sleep(0.1)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._out is not None:
            self._out.close()
            self._out = None

    def _admin(self) -> Any:
        conn = pg.connect(
            host="127.0.0.1", port=self.port, dbname="pgbouncer", user=self.user, connect_timeout=2
        )
        conn.autocommit = True
        return conn

    def pools(self, database: str) -> Pools:
        """`SHOW POOLS` for `database` (zeros before its first client)."""
        conn = self._admin()
        try:
            cur = conn.cursor()
            cur.execute("SHOW POOLS")
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        finally:
            conn.close()
        mine = [r for r in rows if r["database"] == database]

        def total(key: str) -> int:
            return sum(int(r.get(key) or 0) for r in mine)

        wait_s = max(
            (int(r.get("maxwait") or 0) + int(r.get("maxwait_us") or 0) / 1e6 for r in mine),
            default=0.0,
        )
        return Pools(
            cl_active=total("cl_active"), cl_waiting=total("cl_waiting"),
            sv_active=total("sv_active"), sv_idle=total("sv_idle"), sv_used=total("sv_used"),
            maxwait_s=wait_s,
        )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Write a configuration for CI, which starts `pgbouncer` itself and stops it by its pid."""
    p = argparse.ArgumentParser(prog="python -m agent_jobs.bench.bouncer", description=__doc__)
    p.add_argument("dir", type=Path)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--target-host", default="127.0.0.1")
    p.add_argument("--target-port", type=int, default=5432)
    p.add_argument("--user", default="postgres")
    p.add_argument("--pool-size", type=int, default=4)
    args = p.parse_args(argv)
    ini = write_config(
        args.dir, port=args.port, target_host=args.target_host, target_port=args.target_port,
        user=args.user, pool_size=args.pool_size,
    )  # fmt: skip
    print(ini)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
