"""`SimAdmin`: a small client for the admin routes, for tests and the demo.

It speaks only the HTTP contract, so it drives any service implementing it, not just this sim.
Every method raises `requests.HTTPError` on a non-2xx answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import requests

from agent_jobs.sim.models import Json


class SimAdmin:
    """Load worlds, arm faults and read the request log of a sim at `base_url`."""

    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def reset(self) -> None:
        """Empty world, no faults, empty request log."""
        self._call("POST", "/admin/reset")

    def load(self, world: Mapping[str, Any]) -> None:
        """Replace the world (faults and the request log are left alone)."""
        self._call("PUT", "/admin/world", json=dict(world))

    def dump(self) -> Json:
        """The whole world, every refund ever created included."""
        return self._call("GET", "/admin/world")

    def refunds(self) -> list[Json]:
        """Every refund in the world: the usual thing to assert on."""
        return cast(list[Json], self.dump()["refunds"])

    def arm(
        self,
        operation: str,
        fault: str,
        *,
        times: int = 1,
        delay_s: float | None = None,
        retry_after: str | None = None,
    ) -> Json:
        """Arm `fault` for the next `times` requests to `operation`. `retry_after` is sent as the
        `Retry-After` header of a `throttle` or `error_before_commit` answer, verbatim."""
        body: Json = {"operation": operation, "fault": fault, "times": times}
        if delay_s is not None:
            body["delay_s"] = delay_s
        if retry_after is not None:
            body["retry_after"] = retry_after
        return self._call("POST", "/admin/faults", json=body)

    def faults(self) -> list[Json]:
        return cast(list[Json], self._call("GET", "/admin/faults")["faults"])

    def clear_faults(self) -> int:
        return int(self._call("DELETE", "/admin/faults")["cleared"])

    def requests(
        self,
        operation: str | None = None,
        *,
        min_count: int | None = None,
        wait_s: float | None = None,
    ) -> list[Json]:
        """The request log (for `operation`). With `min_count`, first wait up to `wait_s` seconds
        for that many of them to complete; raises TimeoutError if they do not."""
        if min_count is not None and wait_s is None:
            wait_s = 10.0  # say it, so our HTTP timeout covers the server's wait
        params: dict[str, str] = {}
        if operation is not None:
            params["operation"] = operation
        if min_count is not None:
            params["min_count"] = str(min_count)
        if wait_s is not None:
            params["wait_s"] = str(wait_s)
        timeout = self.timeout + (wait_s or 0.0)
        body = self._call("GET", "/admin/requests", params=params, timeout=timeout)
        if not body["satisfied"]:
            raise TimeoutError(f"fewer than {min_count} completed {operation or 'requests'}")
        return cast(list[Json], body["requests"])

    def clear_requests(self) -> None:
        self._call("DELETE", "/admin/requests")

    def _call(self, method: str, path: str, *, timeout: float | None = None, **kw: Any) -> Json:
        r = requests.request(method, self.base_url + path, timeout=timeout or self.timeout, **kw)
        r.raise_for_status()
        return cast(Json, r.json())
