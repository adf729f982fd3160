"""The sim's error type: an HTTP status plus the contract's `{"error": {code, message}}`."""

from __future__ import annotations

from agent_jobs.sim.models import Json


class SimError(Exception):
    """A refused request. `code` is part of the contract; `message` is for people."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def body(self) -> Json:
        return {"error": {"code": self.code, "message": self.message}}


class StateFileError(Exception):
    """The state file given at start cannot be read back; starting empty would lose a ledger."""
