"""The `gpuwatch` command (entry point `gpuwatch.cli:main`): runs one command, turns its outcome into the exit code."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # collections' import alone was a tenth of `gpuwatch health`'s own time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["health"]:
        # Every node's health check runs this: it must not build the other commands (pydantic, the daemon's
        # modules); cli/health/__init__.py has its own parser from the same definitions (docs/cluster.md).
        from gpuwatch.cli import health

        return _guarded(lambda: health.main(words[1:]))
    from gpuwatch.cli.quick_args import fast_command

    # A plain form of the commands typed most, and `gpuwatch --help`: without argparse (issue 52). The rest, and
    # any usage error, through the parser, which imports no command's module: each handler its own.
    fast = fast_command(words)
    args: object
    if fast is not None:
        handler, args = fast
    else:
        from gpuwatch.cli.parser import build_parser

        parser = build_parser()
        args, unknown = parser.parse_known_args(words)
        if unknown:  # said with the command's own usage, not gpuwatch's
            getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
        if not getattr(args, "handler", None):
            from gpuwatch.cli.status import EXIT_USAGE

            parser.print_help()
            return EXIT_USAGE
        handler = args.handler
    try:
        return _guarded(lambda: int(handler(args)))
    except Exception as exc:
        from gpuwatch.config.quick import CONFIG_ERROR_EXIT, ConfigError  # here: `--help` needs neither

        if not isinstance(exc, ConfigError):
            raise
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT


def _guarded(run: Callable[[], int]) -> int:
    try:
        code = run()
        sys.stdout.flush()  # here, so that a reader that went away is handled below
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`gpuwatch status --watch 1 | head`): stop quietly, as `yes | head` does.
        # Later writes (the interpreter's final flush) go nowhere instead of raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # what a shell reports for a process ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
