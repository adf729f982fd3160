"""No database error carries a row's values: not the statement's parameters (SQLAlchemy's
`[parameters: ...]`), not the driver's DETAIL (`Key (x)=(...)`), not a value quoted in the
first line (`invalid input syntax for type integer: "..."`), nor the statement as psycopg2
interpolated it (`LINE 1: ...`). What a step records as `last_error`, what a log line or a
traceback shows, is built from these exceptions; so is the API's 503."""

from __future__ import annotations

import traceback
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from agent_jobs.orchestrator.steps import error_text
from agent_jobs.store.engine import database_error_line, make_engine

pytestmark = pytest.mark.postgres

# A value from outside: anything printable that would be recognisable if it leaked.
secrets = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1
).map(lambda s: f"s3cr3t-{s}")


@pytest.fixture(scope="module")
def engine(pg_database: str) -> Iterator[Engine]:
    engine = make_engine(pg_database)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS leak_probe (k text PRIMARY KEY)")
        conn.exec_driver_sql("TRUNCATE leak_probe")
    yield engine
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS leak_probe")
    engine.dispose()


def _everything_shown(exc: BaseException) -> str:
    """Every text a person or a log could get from the error."""
    return "\n".join(
        [
            str(exc),
            repr(exc),
            "".join(traceback.format_exception(exc)),
            error_text(exc),
            database_error_line(exc),
            str(getattr(exc, "orig", "")),
        ]
    )


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(secret=secrets)
def test_a_unique_violation_shows_no_key_value(engine: Engine, secret: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO leak_probe (k) VALUES (:k) ON CONFLICT DO NOTHING"), {"k": secret}
        )
    with pytest.raises(DBAPIError) as caught, engine.begin() as conn:
        conn.execute(text("INSERT INTO leak_probe (k) VALUES (:k)"), {"k": secret})
    shown = _everything_shown(caught.value)
    assert secret not in shown
    assert "DETAIL" not in shown and "parameters:" not in shown
    # What is left still says what went wrong, for the operator.
    assert "unique constraint" in database_error_line(caught.value)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(secret=secrets)
def test_a_data_exception_shows_no_quoted_value(engine: Engine, secret: str) -> None:
    # 22P02: the first line itself quotes the value, and psycopg2's LINE 1 shows the statement
    # with the value interpolated.
    with pytest.raises(DBAPIError) as caught, engine.connect() as conn:
        conn.execute(text("SELECT CAST(:v AS integer)"), {"v": secret})
    shown = _everything_shown(caught.value)
    assert secret not in shown
    assert "22P02" in database_error_line(caught.value)


def test_the_driver_message_keeps_its_value_free_first_line(engine: Engine) -> None:
    with pytest.raises(DBAPIError) as caught, engine.connect() as conn:
        conn.exec_driver_sql("SELECT * FROM no_such_table_here")
    assert database_error_line(caught.value) == 'relation "no_such_table_here" does not exist'
