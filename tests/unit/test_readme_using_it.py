"""README's "Using it" examples are meant to be pasted as they are right after "Run it for real".
What can be checked without services is checked here: each example creates its task with an
`Idempotency-Key` of its own (none the walkthrough already took: the same key with another
payload is a 409, and a lookup by a shared key finds someone else's task), every lookup names a
key an example created, Python blocks compile and use no undefined name, every variable a block
reads is set by an earlier block, and no example outside the compose network names the compose
host `redis`. (The examples themselves were run against `make sim api worker beat`.)"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# Where an example sends a key to create a task (header, Celery kwargs, client argument).
_CREATE_KEY = re.compile(
    r"Idempotency-Key:\s*([^\s\"']+)|\"idempotency_key\":\s*\"([^\"]+)\"|"
    r"idempotency_key=\"([^\"]+)\""
)
# Where it looks a task up by its key.
_LOOKUP_KEY = re.compile(r"[?&]idempotency_key=([\w.-]+)|get_by_key\(\"([^\"]+)\"\)")
_SHELL_SET = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=", re.M)
_SHELL_USE = re.compile(r"\$\{?([A-Za-z_]\w*)")
_ENV_READ = re.compile(r"os\.environ\[\"(\w+)\"\]")


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _blocks() -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in _BLOCK.findall(_section("Using it"))]


def _keys(pattern: re.Pattern[str], text: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in pattern.finditer(text)]


def test_each_example_creates_its_task_with_a_key_of_its_own() -> None:
    using = _section("Using it")
    created = _keys(_CREATE_KEY, using)
    assert len(created) >= 3, created  # curl, the Python client, the Celery-native send
    assert len(created) == len(set(created)), f"a key is used by two examples: {created}"
    walkthrough = set(_keys(_CREATE_KEY, _section("Run it for real")))
    assert not walkthrough & set(created), f"taken by Run it for real: {walkthrough & set(created)}"
    # The endpoint table's `?idempotency_key=KEY` is a placeholder, not an example.
    prose = "\n".join(line for line in using.splitlines() if not line.startswith("|"))
    looked_up = _keys(_LOOKUP_KEY, prose)
    assert looked_up, "the Celery-native sender's lookup by key is shown"
    assert set(looked_up) <= set(created), f"a lookup finds no example's task: {looked_up}"


def _defined(tree: ast.AST) -> set[str]:
    names = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def test_python_examples_compile_and_define_every_name_they_use() -> None:
    python = [body for lang, body in _blocks() if lang == "python"]
    assert len(python) >= 2
    for body in python:
        tree = ast.parse(body)  # a SyntaxError fails the test
        compile(tree, "README.md", "exec")
        defined = _defined(tree)
        used = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        assert used <= defined, f"undefined in a README example: {sorted(used - defined)}\n{body}"


def test_every_variable_an_example_reads_is_set_by_an_earlier_block() -> None:
    exported: set[str] = set()
    shell_vars: set[str] = set()
    for lang, body in _blocks():
        if lang == "python":
            missing = set(_ENV_READ.findall(body)) - exported
            assert not missing, f"read from the environment, never exported: {missing}\n{body}"
            continue
        code = "\n".join(line.split("#", 1)[0] for line in body.splitlines())
        used = {v for v in _SHELL_USE.findall(code) if not v.isdigit()}
        unset = used - shell_vars - set(_SHELL_SET.findall(code))
        assert not unset, f"a shell example reads a variable nothing set: {unset}\n{body}"
        shell_vars |= set(_SHELL_SET.findall(code))
        exported |= set(re.findall(r"^\s*export\s+([A-Za-z_]\w*)=", code, re.M))


def test_bare_examples_do_not_name_the_compose_host_and_compose_has_its_variant() -> None:
    using = _section("Using it")
    for lang, body in _blocks():
        if lang != "python":
            continue
        literals = [
            n.value
            for n in ast.walk(ast.parse(body))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
        assert not [s for s in literals if "://redis:" in s], body  # only inside compose
    assert any("docker compose exec" in body for _, body in _blocks())
    assert "`docker-compose`" in using and "`docker compose`" in using  # v1 and v2 spelled out
