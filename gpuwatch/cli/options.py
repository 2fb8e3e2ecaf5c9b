"""The options every command that reads a config or the machine takes (a parent parser), in a module of their
own: `gpuwatch health` builds its parser from it without loading the other commands (docs/cluster.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuwatch.config.runtime import DEFAULT_CONFIG_PATH


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config", type=Path, metavar="FILE",
                        help=f"config file (default {DEFAULT_CONFIG_PATH} if present)")
    common.add_argument("--sysfs-root", type=Path, metavar="DIR",
                        help="sysfs tree to read instead of /sys (tests, captures)")
    common.add_argument("--proc-root", type=Path, metavar="DIR", help="proc tree to read instead of /proc (tests)")
    return common
