"""Shell completion for `gpuwatch` (bash, zsh, fish), generated from the argument parser: one source.

`gpuwatch completion SHELL` prints the script; the package ships them, generated, under
``gpuwatch/cli/completions/`` (scripts/install.sh installs them where each shell looks), and a test keeps
those files equal to what this module generates (``GPUWATCH_UPDATE_COMPLETIONS=1`` rewrites them). It
completes the commands, each command's options, an option's choices, files for a path option, and a
positional argument's choices; trainer names and PCI slots are left to the user.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpuwatch.cli.parser import SHELLS as SHELLS  # the parser's choices (it imports this module only to run it)

FILES = {"bash": "gpuwatch.bash", "zsh": "_gpuwatch", "fish": "gpuwatch.fish"}
HEADER = "generated from gpuwatch's argument parser by gpuwatch/cli/completion.py: do not edit"


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    value: bool = False  # takes a value (the next word)
    choices: tuple[str, ...] = ()
    path: bool = False  # its value is a file or directory
    repeatable: bool = False


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]
    choices: tuple[str, ...] = ()  # of its first positional argument
    files: bool = False  # its positional arguments are files (check-config FILE, train's command line)


def cmd_completion(args: argparse.Namespace) -> int:
    print(script(args.shell, args.root), end="")
    return 0


def shipped(shell: str) -> str:
    """The script the package ships for ``shell`` (what scripts/install.sh installs)."""
    return resources.files("gpuwatch.cli").joinpath("completions", FILES[shell]).read_text()


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    commands = read_commands(parser)
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](commands)


def read_commands(parser: argparse.ArgumentParser) -> list[Command]:
    """Every subcommand of ``parser`` with its options, in `--help`'s order."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    commands = []
    for name, command in sub.choices.items():
        positional = [a for a in command._actions if not a.option_strings]
        choices = tuple(str(c) for c in positional[0].choices or ()) if positional else ()
        files = any(a.type is Path or a.nargs == argparse.REMAINDER for a in positional)
        options = tuple(_option(a) for a in command._actions if a.option_strings)
        commands.append(Command(name, _one_line(helps.get(name, "")), options, choices, files))
    return commands


def _option(action: argparse.Action) -> Option:
    value = action.nargs != 0 and action.nargs != "?"  # store_true/version take none; "?" may go without
    path = action.type is Path or (action.metavar or "") in ("DIR", "FILE")
    return Option(tuple(action.option_strings), _one_line(action.help or ""), value,
                  tuple(str(c) for c in action.choices or ()), path,
                  isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+"))


def _one_line(text: str) -> str:
    """A help text fit for a completion menu: its first clause, no markup, no quote."""
    text = re.sub(r"\s+", " ", text.replace("%%", "%")).strip()
    text = text.split(" (")[0].split("; ")[0]
    return re.sub(r"[`'\"\[\]\\$]", "", text)


# ---- bash ----------------------------------------------------------------------------------------
def bash(commands: list[Command]) -> str:
    names = " ".join(c.name for c in commands)
    cases = "\n".join(_bash_case(c) for c in commands)
    return f"""# bash completion for gpuwatch ({HEADER})
_gpuwatch() {{
    local cur prev cmd="" i words
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        mapfile -t COMPREPLY < <(compgen -W "-h --help --version {names}" -- "$cur")
        return
    fi
    case "$cmd" in
{cases}
    esac
}}
complete -o default -F _gpuwatch gpuwatch
"""


def _bash_case(command: Command) -> str:
    lines = [f"        {command.name})", '            case "$prev" in']
    for option in command.options:
        if not option.value:
            continue
        flags = "|".join(option.flags)
        if option.choices:
            lines.append(f'                {flags}) mapfile -t COMPREPLY < <(compgen -W "{" ".join(option.choices)}" '
                         '-- "$cur"); return ;;')
        elif option.path:
            lines.append(f'                {flags}) compopt -o filenames 2>/dev/null; '
                         'mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;')
        else:
            lines.append(f"                {flags}) COMPREPLY=(); return ;;")
    options = " ".join(flag for option in command.options for flag in option.flags)
    lines.append("            esac")
    if command.files:  # a word not starting with "-": a file (check-config FILE, train's command line)
        lines.append('            [[ "$cur" != -* ]] && { compopt -o filenames 2>/dev/null; '
                     'mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return; }')
    if command.choices:  # a word not starting with "-": its positional's choices
        lines.append(f'            words="{" ".join(command.choices)}"; [[ "$cur" == -* ]] && words="{options}"')
    else:
        lines.append(f'            words="{options}"')
    lines += ['            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")', "            ;;"]
    return "\n".join(lines)


# ---- zsh -----------------------------------------------------------------------------------------
def zsh(commands: list[Command]) -> str:
    described = "\n".join(f"        '{c.name}:{c.help}'" for c in commands)
    cases = "\n".join(_zsh_case(c) for c in commands)
    return f"""#compdef gpuwatch
# zsh completion for gpuwatch ({HEADER})
_gpuwatch() {{
    local curcontext="$curcontext" state line
    typeset -A opt_args
    local -a commands
    commands=(
{described}
    )
    _arguments -C \\
        '(- *)'{{-h,--help}}'[show help]' \\
        '(- *)--version[show the version]' \\
        '1: :->command' \\
        '*:: :->args'
    case $state in
        command) _describe -t commands 'gpuwatch command' commands ;;
        args)
            case $line[1] in
{cases}
            esac
            ;;
    esac
}}
_gpuwatch "$@"
"""


def _zsh_case(command: Command) -> str:
    specs = [_zsh_spec(option) for option in command.options]
    if command.choices:
        specs.append(f"'1:{command.name}:({' '.join(command.choices)})'")
    if command.files:
        specs.append("'*:file:_files'")
    body = " \\\n                        ".join(specs)
    return f"                {command.name}) _arguments \\\n                        {body} ;;"


def _zsh_spec(option: Option) -> str:
    action = ""
    if option.value:
        what = "(" + " ".join(option.choices) + ")" if option.choices else "_files" if option.path else " "
        action = f":{option.flags[-1].lstrip('-')}:{what}"
    exclusive = "" if option.repeatable else f"({' '.join(option.flags)})"
    repeat = "*" if option.repeatable else ""
    help_text = f"[{option.help}]"
    if len(option.flags) == 1:
        return f"'{repeat}{exclusive}{option.flags[0]}{help_text}{action}'"
    return f"'{exclusive}'{{{','.join(repeat + f for f in option.flags)}}}'{help_text}{action}'"


# ---- fish ----------------------------------------------------------------------------------------
def fish(commands: list[Command]) -> str:
    names = " ".join(c.name for c in commands)
    lines = [f"# fish completion for gpuwatch ({HEADER})",
             "complete -c gpuwatch -f",
             f'complete -c gpuwatch -n "not __fish_seen_subcommand_from {names}" -s h -l help -d "show help"',
             f'complete -c gpuwatch -n "not __fish_seen_subcommand_from {names}" -l version -d "show the version"']
    for command in commands:
        lines.append(f'complete -c gpuwatch -n "not __fish_seen_subcommand_from {names}" -a {command.name} '
                     f"-d '{command.help}'")
    for command in commands:
        seen = f'-n "__fish_seen_subcommand_from {command.name}"'
        for option in command.options:
            flags = " ".join(f"-s {f[1:]}" if len(f) == 2 else f"-l {f[2:]}" for f in option.flags)
            value = ""
            if option.value:
                value = f" -x -a '{' '.join(option.choices)}'" if option.choices else " -r -F" if option.path else " -x"
            lines.append(f"complete -c gpuwatch {seen} {flags}{value} -d '{option.help}'")
        if command.choices:
            lines.append(f"complete -c gpuwatch {seen} -x -a '{' '.join(command.choices)}'")
        if command.files:
            lines.append(f"complete -c gpuwatch {seen} -F")
    return "\n".join(lines) + "\n"

