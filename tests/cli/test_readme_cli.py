"""Issue 32 point 11: the README's CLI table and `gpuwatch --help` are one source. Every command of the parser has
a row and every row a command; each row names exactly its command's options (the common ones, `-c FILE`,
`--sysfs-root DIR`, `--proc-root DIR` and `-h`, are in the sentence under the table), with the parser's value
names (metavar) or choices (`a|b|c`), and its positional arguments."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuwatch.cli.parser import build_parser
from tests.support.cli import gpuwatch

README = Path(__file__).resolve().parents[2] / "README.md"
COMMON = {"-h", "--help", "-c", "--config", "--sysfs-root", "--proc-root"}


@dataclass
class Row:
    """One row's synopsis: its commands and, in order, what follows them, split into words."""

    commands: list[str]
    words: list[str] = field(default_factory=list)

    def options(self) -> dict[str, str | None]:
        """Each option named and the value word after it (None: a flag, or an optional value in brackets)."""
        found: dict[str, str | None] = {}
        for i, word in enumerate(self.words):
            if word.startswith("-") and word != "--":
                after = self.words[i + 1] if i + 1 < len(self.words) else None
                found[word] = after if after and not after.startswith(("-", "[", "]")) else None
                if after == "[" and i + 2 < len(self.words):  # [--simulate [N]]: an optional value
                    found[word] = self.words[i + 2]
            if word == "--":  # train's command line: not gpuwatch's options
                break
        return found


def readme_rows() -> list[Row]:
    text = README.read_text()
    table = text[text.index("## CLI"):].split("\n\n")[1]
    rows = []
    for line in table.splitlines()[2:]:
        synopsis = re.match(r"\| `gpuwatch ([^`]+)` \|", line)
        assert synopsis, f"a row without a `gpuwatch ...` synopsis: {line[:80]}"
        words = re.findall(r"\[|\]|[^\s\[\]]+", synopsis.group(1).replace("\\|", "|"))
        rows.append(Row(words[0].split("|"), words[1:]))
    return rows


def parser_commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _value_names(action: argparse.Action) -> set[str]:
    """How the README may name an option's value: its metavar, or its choices as ``a|b|c``."""
    names = set()
    if action.metavar:
        names.add(str(action.metavar))
    if action.choices:
        names.add("|".join(str(c) for c in action.choices))
    return names or {action.dest.upper()}


def test_every_command_has_a_row_and_every_row_a_command() -> None:
    in_readme = {name for row in readme_rows() for name in row.commands}
    assert in_readme == set(parser_commands())
    helped = gpuwatch("--help").stdout
    listed = set(re.findall(r"^    ([a-z-]+)", helped, re.M))
    assert listed == in_readme  # `gpuwatch --help` lists the same commands


@pytest.mark.parametrize("name", sorted(parser_commands()))
def test_each_row_names_its_commands_options_values_and_arguments(name: str) -> None:
    command = parser_commands()[name]
    rows = [row for row in readme_rows() if name in row.commands]
    named: dict[str, str | None] = {}
    for row in rows:
        named.update(row.options())
    flags = {flag: action for action in command._actions for flag in action.option_strings}
    unknown = set(named) - set(flags)
    assert not unknown, f"the README names options `gpuwatch {name}` does not have: {unknown}"
    # One spelling of each option the parser has, beyond the common ones, is in the README.
    for action in {id(a): a for a in flags.values()}.values():
        if set(action.option_strings) <= COMMON or action.help == argparse.SUPPRESS:  # hidden: the scripts' own
            continue
        spelled = [flag for flag in action.option_strings if flag in named]
        assert spelled, f"`gpuwatch {name}` has {'/'.join(action.option_strings)}; the README's row does not say so"
        value = named[spelled[0]]
        if action.nargs == 0:
            assert value is None, f"{spelled[0]} is a flag, the README gives it a value {value}"
        elif value is not None or action.nargs != "?":
            assert value in _value_names(action), \
                f"{spelled[0]}'s value is {' or '.join(sorted(_value_names(action)))} in --help, {value} in the README"
    words = [w for row in rows for w in row.words]
    for action in command._actions:
        if action.option_strings or action.nargs == argparse.REMAINDER:
            continue
        assert _value_names(action) & set(words), f"`gpuwatch {name}`'s argument {action.dest} is not in its row"


def test_the_common_options_are_spelled_as_help_spells_them() -> None:
    text = README.read_text()
    sentence = text[text.index("The daemon-side commands ("):].split("\n\n")[0]
    run = parser_commands()["run"]
    for action in run._actions:
        if action.option_strings and set(action.option_strings) <= COMMON and action.metavar:
            assert f"`{action.option_strings[0]} {action.metavar}`" in sentence
    for name, command in parser_commands().items():  # the sentence names who does not take them
        takes = any("--config" in a.option_strings for a in command._actions)
        assert takes or f"`{name}`" in sentence, name
