"""The daemon's part for processes not run under gpuwatch (supervise/unmanaged_stops.py), on real processes.

Real ``sleep`` children stand for a user's training run started outside gpuwatch; their pids (with their real
start times) appear in a fake /proc tree (sim/proctree.py, the kernel's layout) holding a render node of the GPU.
What is checked is the REAL process's state in the machine's /proc/<pid>/stat: T when SIGSTOPped.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.config.file import Config
from gpuwatch.model import Acted, FanMode, FanState, GpuProcess, GpuReading, Snapshot, TempReading, UnmanagedState
from gpuwatch.procfs import Procfs
from gpuwatch.sim.proctree import RENDER_NODE, FakeProcTree, amdgpu_fdinfo
from gpuwatch.supervise.actions import TIMEOUT_SHARE, UNKNOWN_JOB_TIMEOUT_S
from gpuwatch.supervise.unmanaged import Stopped
from gpuwatch.supervise.unmanaged_stops import RECORD_NAME, UnmanagedProcesses, resume_recorded, write_record
from tests.support.processes import Processes
from tests.support.waiting import wait_for

SLOT = "0000:03:00.0"
LIMIT_S = TIMEOUT_SHARE * UNKNOWN_JOB_TIMEOUT_S
FULL_FAN = (FanState(gpu_id=SLOT, backend="pwm1", mode=FanMode.CURVE, can_rise=False),)


def real_state(pid: int) -> str:
    """The real process's state letter (proc_pid_stat(5) field 3)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def real_start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])


class Rig:
    def __init__(self, tmp: Path, processes: Processes) -> None:
        self.processes = processes
        self.proc = FakeProcTree(tmp / "proc")
        self.runtime = tmp / "run"
        self.runtime.mkdir()
        self.now = 1000.0
        self.part = UnmanagedProcesses(Procfs(self.proc.root), self.runtime, clock=lambda: self.now)
        self.pids: list[int] = []
        self.last = UnmanagedState(gpu_id=SLOT, on_hot="")  # the last tick's state of the GPU

    def sleeper(self, uid: int | None = None) -> int:
        """A real process holding the GPU (in the fake /proc)."""
        pid = self.processes.start(f"sleep{len(self.pids)}", ["sleep", "600"]).process.pid
        self.proc.add_process(pid, comm="sleep", cmdline=["python3", "mine.py"], uid=1000 if uid is None else uid,
                              start_ticks=real_start_ticks(pid))
        self.proc.set_fd(pid, 5, RENDER_NODE, amdgpu_fdinfo(client_id=len(self.pids) + 1, pdev=SLOT))
        self.pids.append(pid)
        return pid

    def tick(self, junction_c: float, config: Config, trainer: str | None = None) -> tuple[int, ...]:
        gpu = GpuReading(gpu_id=SLOT, card="card0", backend="amdgpu",
                         temps=(TempReading("junction", junction_c, crit_c=110.0),))
        rows = tuple(GpuProcess(pid=pid, gpu_id=SLOT, command="python3 mine.py", trainer=trainer) for pid in self.pids)
        snapshot = Snapshot(taken_unix=0.0, taken_monotonic=0.0, gpus=(gpu,), processes=rows)
        (state,) = self.part.tick(snapshot, Acted(fans=FULL_FAN), config)
        self.last = state
        return state.stopped_pids

    def record(self) -> list[int]:
        path = self.runtime / RECORD_NAME
        return [row["pid"] for row in json.loads(path.read_text())["stopped"]] if path.exists() else []


STOP = Config.model_validate({"unmanaged": {"on_hot": "stop"}})
REPORT = Config()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with Processes(tmp_path / "logs") as processes:
        made = Rig(tmp_path, processes)
        try:
            yield made
        finally:
            for pid in made.pids:  # a stopped child would wait out the SIGTERM grace
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass


def test_stopped_past_crit_and_continued_when_cool(rig: Rig) -> None:
    a, b = rig.sleeper(), rig.sleeper()
    assert rig.tick(112, STOP) == tuple(sorted((a, b)))
    wait_for(lambda: real_state(a) == "T" and real_state(b) == "T", "both SIGSTOPped")
    assert sorted(rig.record()) == sorted((a, b))  # what a killed daemon leaves for `gpuwatch restore`
    assert rig.tick(100, STOP) == tuple(sorted((a, b)))  # warm, not cool: still stopped
    assert real_state(a) == "T"
    assert rig.tick(60, STOP) == ()
    wait_for(lambda: real_state(a) != "T" and real_state(b) != "T", "both continued")
    assert rig.record() == [] and not (rig.runtime / RECORD_NAME).exists()


def test_report_never_signals(rig: Rig) -> None:
    a = rig.sleeper()
    for _ in range(3):
        assert rig.tick(115, REPORT) == ()
    assert real_state(a) != "T" and rig.record() == []


def test_trainers_and_root_are_never_stopped(rig: Rig) -> None:
    a = rig.sleeper()
    assert rig.tick(115, STOP, trainer="attached-run") == ()
    rig.proc.add_process(a, comm="sleep", uid=0, start_ticks=real_start_ticks(a))  # now root's, says /proc
    rig.proc.set_fd(a, 5, RENDER_NODE, amdgpu_fdinfo(client_id=1, pdev=SLOT))
    assert rig.tick(115, STOP) == ()
    assert real_state(a) != "T"


def test_bound_continues_then_rests_before_another_stop(rig: Rig) -> None:
    a = rig.sleeper()
    config = Config.model_validate({"unmanaged": {"on_hot": "stop", "restop_after_s": 300}})
    assert rig.tick(115, config) == (a,)
    wait_for(lambda: real_state(a) == "T", "SIGSTOPped")
    rig.now += LIMIT_S
    assert rig.tick(115, config) == ()  # at the bound, still at crit
    wait_for(lambda: real_state(a) != "T", "continued at the bound")
    rig.now += 299
    assert rig.tick(115, config) == ()  # resting
    assert real_state(a) != "T"
    rig.now += 1
    assert rig.tick(115, config) == (a,)
    wait_for(lambda: real_state(a) == "T", "stopped again after the rest")


def test_reload_to_report_continues(rig: Rig) -> None:
    a = rig.sleeper()
    rig.tick(115, STOP)
    wait_for(lambda: real_state(a) == "T", "SIGSTOPped")
    assert rig.tick(115, REPORT) == ()
    wait_for(lambda: real_state(a) != "T", "continued by the reload to report")
    assert rig.tick(115, REPORT) == () and real_state(a) != "T"


def test_the_states_at_rest_are_kept_and_follow_a_reload_and_the_stops_counted(rig: Rig) -> None:
    """Nothing stopped under "report" (policy.at_rest): nothing decided, the last states handed back again."""
    a = rig.sleeper()
    assert rig.tick(60, REPORT) == ()
    first = rig.last
    assert rig.tick(115, REPORT) == () and rig.last is first
    assert (first.on_hot, first.stops_total, first.reason) == ("report", 0, None)
    assert rig.tick(115, STOP) == (a,) and (rig.last.on_hot, rig.last.stops_total) == ("stop", 1)
    wait_for(lambda: real_state(a) == "T", "SIGSTOPped")
    assert rig.tick(115, REPORT) == () and (rig.last.on_hot, rig.last.stops_total) == ("report", 1)
    wait_for(lambda: real_state(a) != "T", "continued by the reload to report")
    kept = rig.last
    assert rig.tick(115, REPORT) == () and rig.last == kept


def test_stop_continues_every_process(rig: Rig) -> None:
    a, b = rig.sleeper(), rig.sleeper()
    rig.tick(115, STOP)
    wait_for(lambda: real_state(a) == "T" and real_state(b) == "T", "both SIGSTOPped")
    rig.part.stop()
    wait_for(lambda: real_state(a) != "T" and real_state(b) != "T", "both continued at the daemon's exit")
    assert not (rig.runtime / RECORD_NAME).exists()


def test_recorded_processes_continued_and_a_reused_pid_never_signalled(rig: Rig) -> None:
    """A killed daemon's record: the process still the recorded one is continued; one whose pid now belongs to
    another process (the record's start time differs) is not signalled."""
    mine, other = rig.sleeper(), rig.sleeper()
    for pid in (mine, other):
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: real_state(mine) == "T" and real_state(other) == "T", "both stopped")
    write_record(rig.runtime, [
        Stopped(pid=mine, start_ticks=real_start_ticks(mine), gpu_ids=(SLOT,), since=0, since_unix=0, reason="crit"),
        Stopped(pid=other, start_ticks=real_start_ticks(other) - 7, gpu_ids=(SLOT,), since=0, since_unix=0,
                reason="crit"),
    ])
    done, problems = resume_recorded(Procfs(rig.proc.root), rig.runtime)
    assert problems == [] and len(done) == 2
    wait_for(lambda: real_state(mine) != "T", "the recorded process continued")
    assert real_state(other) == "T"  # not the recorded process: left alone
    assert not (rig.runtime / RECORD_NAME).exists()


def test_a_broken_record_is_one_problem_line(rig: Rig) -> None:
    (rig.runtime / RECORD_NAME).write_text("{not json")
    done, problems = resume_recorded(Procfs(rig.proc.root), rig.runtime)
    assert done == [] and len(problems) == 1 and "unreadable record" in problems[0]
    assert not (rig.runtime / RECORD_NAME).exists()


def test_a_stopped_process_that_exits_is_forgotten(rig: Rig) -> None:
    a = rig.sleeper()
    rig.tick(115, STOP)
    wait_for(lambda: real_state(a) == "T", "SIGSTOPped")
    os.kill(a, signal.SIGKILL)
    rig.proc.remove(a)
    assert rig.tick(115, STOP) == () and rig.record() == []


def test_no_stop_without_a_record(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """A runtime directory the record cannot be written to (full, read-only; here: gone, a file in its place):
    nothing is stopped, since a killed daemon would leave it stopped with nothing to continue it."""
    a = rig.sleeper()
    rig.runtime.rmdir()
    rig.runtime.write_text("not a directory")
    assert rig.tick(115, STOP) == ()
    assert rig.tick(115, STOP) == ()
    assert real_state(a) != "T"
    assert sum("cannot record stopped processes" in r.message for r in caplog.records) == 1  # once per episode
    rig.runtime.unlink()
    rig.runtime.mkdir()
    assert rig.tick(115, STOP) == (a,)
    wait_for(lambda: real_state(a) == "T", "stopped once it can be recorded")
