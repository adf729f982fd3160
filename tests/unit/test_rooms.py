"""The code base's shape, as issue "One transition path" asks it: modules a newcomer can hold
in their head, one place that knows which database it talks to, one place that writes a
task's status. Each check reads the source; none runs it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agent_jobs"
BACKEND = PACKAGE / "store" / "backend"
MAX_LINES = 500


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _outside_backend() -> list[Path]:
    return [p for p in _sources() if BACKEND not in p.parents]


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


# Asking which database this is: `dialect.name`, a comparison with a dialect's name, a compile
# rule for one dialect. (Declarations that name a dialect for SQLAlchemy to pick from, a type's
# `with_variant` or an index's `postgresql_where`, ask nothing at run time.)
_BRANCH = re.compile(
    r"dialect\.name|\bdialect\s*[!=]=|[!=]=\s*[\"'](postgresql|sqlite)[\"']"
    r"|@compiles\([^)]*,\s*[\"'](postgresql|sqlite)[\"']"
)


def test_no_dialect_branch_outside_the_backends() -> None:
    found = [
        f"{p.relative_to(PACKAGE)}:{i}: {line.strip()}"
        for p in _outside_backend()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if _BRANCH.search(line)
    ]
    assert found == []


def test_the_branch_pattern_finds_branches() -> None:
    for line in (
        'if conn.dialect.name == "postgresql":',
        'if self.dialect != "postgresql":',
        '@compiles(db_now, "sqlite")',
        'elif dialect == "sqlite":',
    ):
        assert _BRANCH.search(line), line
    assert not _BRANCH.search('JsonType = JSON().with_variant(JSONB(), "postgresql")')


def _writes_status(node: ast.Call) -> bool:
    """`update(tasks)....values(status=...)` (or a `"status"` key in a dict it is given)."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "values"):
        return False
    chain = ast.unparse(func.value)
    if "update(tasks)" not in chain:
        return False
    if any(k.arg == "status" for k in node.keywords):
        return True
    return any(
        isinstance(a, ast.Dict) and any(ast.unparse(k) == "'status'" for k in a.keys if k)
        for a in node.args
    )


# A first look, in the source, for the usual spellings only: a Core `values({tasks.c.status:
# ...})` or a quoted `"tasks"` passes it. Every spelling is caught where it runs:
# tests/integration/test_status_writes.py watches each statement the database receives during a
# run of the real runtime and checks the stack it came from.
# The SQLite backend builds its compare-and-set's values as a dict it splats (`**values`).
_SQL_STATUS_WRITE = re.compile(r"UPDATE\s+tasks\s+SET[^;]*?\bstatus\s*=", re.S | re.I)
WRITERS = {"store/transition.py", "store/backend/postgres_sql.py", "store/backend/sqlite.py"}


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_transition_path_writes_a_status(path: Path) -> None:
    rel = str(path.relative_to(PACKAGE))
    if rel in WRITERS:
        return
    source = path.read_text()
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
    assert not [ast.unparse(c) for c in calls if _writes_status(c)]
    assert not _SQL_STATUS_WRITE.search(source)


def test_the_status_write_detector_detects() -> None:
    call = ast.parse("update(tasks).where(x).values(status='FAILED')").body[0]
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    assert _writes_status(call.value)
    assert _SQL_STATUS_WRITE.search("UPDATE tasks SET version = 2, status = 'X' WHERE id = 1")
