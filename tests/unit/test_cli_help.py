"""Every `agent-jobs` command, option and positional explains itself in `--help`, and `--help`
of every command and subcommand answers with exit status 0. In-process: the parser alone."""

from __future__ import annotations

import argparse

import pytest

from agent_jobs.cli import build_parser


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    """Every command under `parser`: its words, its parser and the help its parent gives it."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
            for name, sub in action.choices.items():
                found.append(((*path, name), sub, helps.get(name)))
                found += _commands(sub, (*path, name))
    return found


def without_help(parser: argparse.ArgumentParser) -> list[str]:
    """Each command and argument with no help text, named as a user would type it."""
    missing = []
    for words, _, text in _commands(parser):
        if not text:
            missing.append(f"command: {' '.join(words)}")
    for words, sub, _ in [((), parser, None), *_commands(parser)]:
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if not action.help:
                name = "/".join(action.option_strings) or action.dest
                missing.append(f"option: {' '.join(('agent-jobs', *words))} {name}")
    return missing


def test_every_command_and_argument_has_help() -> None:
    assert without_help(build_parser()) == []


def test_the_check_names_what_lacks_help() -> None:
    """The walk above finds a command and an argument without help, at any depth."""
    parser = argparse.ArgumentParser(prog="agent-jobs")
    sub = parser.add_subparsers()
    group = sub.add_parser("group", help="a group")
    inner = group.add_subparsers()
    leaf = inner.add_parser("leaf")
    leaf.add_argument("--rows", type=int, help="rows")
    leaf.add_argument("--small", type=int)
    leaf.add_argument("task_id")
    assert without_help(parser) == [
        "command: group leaf",
        "option: agent-jobs group leaf --small",
        "option: agent-jobs group leaf task_id",
    ]


COMMANDS = [words for words, _, _ in _commands(build_parser())]


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(w) for w in COMMANDS])
def test_help_of_every_command_exits_0(
    words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([*words, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: agent-jobs {' '.join(words)}"), out[:200]


def test_the_walk_reaches_the_nested_commands() -> None:
    """A walk that stopped at the top level would pass the checks above on too little."""
    assert {("bench", "webhooks", "hot-path"), ("dead-letters", "replay"), ("ops", "set")} <= set(
        COMMANDS
    )
    assert len(COMMANDS) > 60


def test_release_phase_names_the_ladder_it_is_checked_against() -> None:
    """`release phase --help` lists the phases without loading the store; the names it lists
    are the ladder `set_phase` checks, in its order."""
    from agent_jobs.cli.releases import PHASES
    from agent_jobs.releases.rollout import PHASE_NAMES

    assert PHASES == PHASE_NAMES
