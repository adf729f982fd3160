"""The database bounds as libpq receives them: a positive timeout is never sent as 0 (which
Postgres reads as "no timeout"), a timeout of 0 is not sent at all, and with both at 0 no
`options` startup parameter is sent (a pooler may refuse it)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.config import Settings
from agent_jobs.store.backend.postgres import pg_connect_args

seconds = st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e6, allow_nan=False))


@given(statement=seconds, lock=seconds, connect=st.integers(min_value=1, max_value=300))
def test_each_bound_reaches_libpq_as_set(statement: float, lock: float, connect: int) -> None:
    cfg = Settings().with_overrides(
        db_statement_timeout_s=statement, db_lock_timeout_s=lock, db_connect_timeout_s=connect
    )
    args = pg_connect_args(cfg)
    assert args["connect_timeout"] == connect
    sent = dict(re.findall(r"-c (\w+)=(\d+)", args.get("options", "")))
    for name, value in (("statement_timeout", statement), ("lock_timeout", lock)):
        if value > 0:
            assert int(sent[name]) >= 1  # never 0, which would mean no bound at all
            assert abs(int(sent[name]) - value * 1000) <= max(1.0, value * 1000 * 1e-9) + 0.5
        else:
            assert name not in sent
    assert ("options" in args) == (statement > 0 or lock > 0)
    # A vanished peer is found by keepalives within a few multiples of the connect timeout.
    assert args["keepalives"] == 1
    assert args["keepalives_idle"] + 3 * args["keepalives_interval"] <= 4 * connect
