"""A URL shown in a message (the one line of a service that cannot reach its database or
broker, a benchmark's refusal) never shows its password, wherever the URL carries it."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.store.engine import shown_url

passwords = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40
).map(lambda s: f"Pw9{s}")


@given(password=passwords, scheme=st.sampled_from(["postgresql", "postgres", "redis", "amqp"]))
def test_the_password_is_hidden_in_the_userinfo(password: str, scheme: str) -> None:
    url = f"{scheme}://user:{quote(password, safe='')}@db.example:5432/agent_jobs"
    shown = shown_url(url)
    assert password not in shown and quote(password, safe="") not in shown
    assert "***" in shown


@given(password=passwords, key=st.sampled_from(["password", "PASSWORD", "passwd"]))
def test_the_password_is_hidden_in_the_query(password: str, key: str) -> None:
    url = (
        f"postgresql://user@db.example/agent_jobs?sslmode=require&{key}={quote(password, safe='')}"
    )
    shown = shown_url(url)
    assert password not in shown and quote(password, safe="") not in shown
    assert "sslmode=require" in shown


@given(text=st.text(max_size=200))
def test_anything_else_is_shown_without_raising(text: str) -> None:
    assert isinstance(shown_url(text), str)
