"""`gpuwatch status` while a daemon runs: its fresh published document shown without the config's models.

The common case, the command a user types most: the config's ``runtime_dir`` read alone (config/quick.py), the
state file read and decoded, shown by the same ``show`` as always. Everything else (no daemon or a stale one: a
direct reading; ``--remote``; ``--watch``, which starts once; ``--history``; a config the quick read cannot take)
is the handler in cli/commands.py, which loads the whole config. Issue 52: within 2x of Python's own start
(tests/cli/test_startup_imports.py pins the imports, benchmarks/cli_latency.py measures it).
"""

from __future__ import annotations

import os

from gpuwatch.config.quick import client_runtime_dir_quick, config_file
from gpuwatch.config.runtime import STATE_FILE_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


def cmd_status(args: argparse.Namespace) -> int:
    # Any other view (`--history` on main since hist's merge, options still to come) is the whole handler's.
    if args.remote is None and not args.watch and getattr(args, "history", None) is None:
        runtime_dir = client_runtime_dir_quick(config_file(args.config), simulators=True)
        if runtime_dir is not None:
            from gpuwatch.cli.show import fresh_document, show

            document = fresh_document(os.path.join(runtime_dir, STATE_FILE_NAME))
            if document is not None:  # a live daemon owns its restore files: nothing is left behind to say
                return show(args, lambda: (document, None))
    from gpuwatch.cli.commands import cmd_status as whole

    return whole(args)
