"""An attached run's directory outlives its wrapper for its log only, and not forever (cli/train/run_dir.py): each
new wrapper prunes its user's finished runs to the newest KEEP_FINISHED_RUNS within KEEP_FINISHED_BYTES; a run whose
wrapper lives (its flock held) or was killed (the lock dropped), an older wrapper's directory and a link are told
apart in a real runtime directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.cli.train.run_dir import (
    KEEP_FINISHED_RUNS,
    FinishedRun,
    make_run_dir,
    prune_finished_runs,
    runs_to_prune,
)

MIB = 1024 * 1024


@pytest.mark.parametrize(("runs", "keep_runs", "keep_bytes", "pruned"), [
    ([], 3, 100, []),
    ([("a", 1, 10), ("b", 2, 10), ("c", 3, 10)], 3, 100, []),
    ([("a", 1, 10), ("b", 2, 10), ("c", 3, 10), ("d", 4, 10)], 3, 100, ["a"]),  # by count: the oldest go
    ([("d", 4, 10), ("a", 1, 10), ("c", 3, 10), ("b", 2, 10)], 2, 100, ["b", "a"]),  # by mtime, not listing order
    ([("a", 1, 40), ("b", 2, 40), ("c", 3, 40)], 3, 100, ["a"]),  # by bytes: 80 fit, 120 do not
    ([("a", 1, 10), ("b", 2, 500)], 3, 100, ["a"]),  # the newest is kept whatever its size, and fills the room
    ([("a", 1, 500), ("b", 2, 10)], 3, 100, ["a"]),
])
def test_the_newest_finished_runs_are_kept_within_a_count_and_bytes(
        runs: list[tuple[str, float, int]], keep_runs: int, keep_bytes: int, pruned: list[str]) -> None:
    finished = [FinishedRun(Path(name), modified_s, size_bytes) for name, modified_s, size_bytes in runs]
    assert runs_to_prune(finished, keep_runs, keep_bytes) == [Path(name) for name in pruned]


def _finished_run(base: Path, name: str, modified_s: float, files: tuple[str, ...] = ("output.log",)) -> Path:
    run = base / name
    run.mkdir(mode=0o700)
    for file in files:
        (run / file).write_bytes(b"a line\n")
        os.utime(run / file, (modified_s, modified_s))
    return run


def test_a_new_wrapper_prunes_its_users_finished_runs_and_nothing_else(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    environ = {"XDG_RUNTIME_DIR": str(xdg)}
    live = make_run_dir(environ, os.geteuid(), 1)  # a wrapper still running, the oldest log of all
    (live.log_file).write_bytes(b"still training\n")
    os.utime(live.log_file, (1000, 1000))
    base = live.path.parent
    finished = [_finished_run(base, f"{100 + i}-run", 2000 + i, ("output.log", "output.log.1"))
                for i in range(KEEP_FINISHED_RUNS + 2)]
    older_wrapper = _finished_run(base, "7-older", 1500, ("output.log", "heartbeat.json"))  # not its log only
    elsewhere = _finished_run(tmp_path, "elsewhere", 1600)
    (base / "9-link").symlink_to(elsewhere)
    try:
        made = make_run_dir(environ, os.geteuid(), 2)
        made.remove()
        kept = sorted(path.name for path in base.iterdir())
        assert kept == sorted([live.path.name, older_wrapper.name, "9-link",
                               *(run.name for run in finished[2:])]), kept
        assert (elsewhere / "output.log").exists() and (older_wrapper / "heartbeat.json").exists()
        assert live.log_file.read_bytes() == b"still training\n"
    finally:
        live.remove()


def test_a_killed_wrappers_run_is_finished_once_the_kernel_drops_its_lock(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    first = make_run_dir({"XDG_RUNTIME_DIR": str(xdg)}, os.geteuid(), 1)
    first.remove()  # only made for the runs folder
    base = first.path.parent
    killed = _finished_run(base, "5-killed", 1000)
    for i in range(KEEP_FINISHED_RUNS):
        _finished_run(base, f"{10 + i}-run", 2000 + i)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)",
                               str(killed)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        prune_finished_runs(base, os.geteuid())
        assert (killed / "output.log").exists()  # its wrapper lives
    finally:
        holder.kill()
        holder.wait(60)
    prune_finished_runs(base, os.geteuid())
    assert not killed.exists()
    assert len(list(base.iterdir())) == KEEP_FINISHED_RUNS
