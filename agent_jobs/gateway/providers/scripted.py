"""A deterministic provider for tests, demos and evals, that says what it is.

Its decisions come from `rules(request) -> proposal`, a function of the request's verified facts
supplied by the workflow; it wraps the proposal exactly as a real model answers (JSON content, or
`tool_calls`), with token counts from the gateway's estimator. Its model ids start with
`scripted-` and every response carries `"scripted": true`, so a trace can never pass a scripted
run off as a real model's. Faults are injected by count: the next N calls raise
`ModelUnavailable`, or return malformed output (to exercise the repair path).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from agent_jobs.gateway.chat import ChatResponse, chat_completion, message_text, proposal_message
from agent_jobs.gateway.contracts import Message, ModelRequest, Timeouts, ToolSpec
from agent_jobs.gateway.errors import ModelUnavailable, ProviderRejected
from agent_jobs.gateway.tokens import estimate_input_tokens, estimate_text_tokens

Rules = Callable[[ModelRequest], Mapping[str, Any]]
MalformedKind = Literal["not_json", "wrong_schema"]

SCRIPTED_PREFIX = "scripted-"

MALFORMED_OUTPUTS: dict[MalformedKind, str] = {
    # Cut off mid-object, as a reply truncated by a length limit is.
    "not_json": '{"kind": "final_draft", "draft": {"text": "Your refund',
    # Parses, but is no proposal: an invented kind with an amount the schema does not allow.
    "wrong_schema": '{"kind": "refund_now", "amount_minor": 129900}',
}


class ScriptedProvider:
    """Deterministic `Provider`. Thread-safe; fault counters are shared by all models it serves.

    `unavailable` / `malformed` arm that many failing calls up front; `fail_next` arms more.
    """

    def __init__(
        self,
        rules: Rules,
        *,
        unavailable: int = 0,
        retry_after_s: float | None = None,
        malformed: int = 0,
        malformed_kind: MalformedKind = "not_json",
    ) -> None:
        self._rules = rules
        self._lock = threading.Lock()
        self._unavailable = unavailable
        self._retry_after_s = retry_after_s
        self._malformed = malformed
        self._malformed_kind: MalformedKind = malformed_kind
        self._served = 0
        self.requests: list[ModelRequest] = []

    def fail_next(
        self,
        *,
        unavailable: int = 0,
        malformed: int = 0,
        retry_after_s: float | None = None,
        malformed_kind: MalformedKind | None = None,
    ) -> None:
        """Make the next calls fail: first `unavailable` raise, then `malformed` return junk."""
        with self._lock:
            self._unavailable += unavailable
            self._malformed += malformed
            self._retry_after_s = retry_after_s
            if malformed_kind is not None:
                self._malformed_kind = malformed_kind

    @property
    def calls(self) -> int:
        """Calls received, failed ones included."""
        with self._lock:
            return len(self.requests)

    def complete(
        self,
        model: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        output_schema: Mapping[str, Any] | None,
        timeouts: Timeouts,
        *,
        request: ModelRequest,
    ) -> ChatResponse:
        """Answer with `rules(request)` wrapped as a chat completion (or an armed fault)."""
        if not model.startswith(SCRIPTED_PREFIX):
            # A route pointing a real model id at the scripted provider is a config mistake
            # that would make a demo look like a real model's run.
            raise ProviderRejected(
                404,
                f"scripted provider serves only '{SCRIPTED_PREFIX}*' models",
                provider="scripted",
                model=model,
            )
        seen = request.model_copy(update={"messages": list(messages), "tools": list(tools)})
        with self._lock:
            self.requests.append(seen)
            self._served += 1
            response_id = f"chatcmpl-scripted-{self._served}"
            if self._unavailable > 0:
                self._unavailable -= 1
                raise ModelUnavailable(
                    "server_error",
                    "scripted outage",
                    retry_after_s=self._retry_after_s,
                    provider="scripted",
                    model=model,
                )
            junk = MALFORMED_OUTPUTS[self._malformed_kind] if self._malformed > 0 else None
            if junk is not None:
                self._malformed -= 1
        if junk is not None:
            message: dict[str, Any] = {"role": "assistant", "content": junk}
        else:
            message = proposal_message(dict(self._rules(seen)))
        return chat_completion(
            model,
            message,
            prompt_tokens=estimate_input_tokens(messages, tools, output_schema),
            completion_tokens=estimate_text_tokens(message_text(message)),
            response_id=response_id,
            extra={"system_fingerprint": "scripted", "scripted": True},
        )
