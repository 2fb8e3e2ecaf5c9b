"""The registry of attached runs (supervise/attached_runs.py) without a socket: names, bounds, re-attach,
commands, events on the session, ended runs dropped. The run's pid is this test's own process (real)."""

from __future__ import annotations

import os
import subprocess

from gpuwatch.attach import Attach, Beat, Event, Exited
from gpuwatch.config.sections import AttachedConfig
from gpuwatch.model import TrainerPhase
from gpuwatch.procs.index import TREE_EVERY_S
from gpuwatch.supervise.access import Peer
from gpuwatch.supervise.actions import Thermal
from gpuwatch.supervise.attached_runs import AttachedRuns
from gpuwatch.supervise.orphans import started_at

CONFIG = AttachedConfig(debounce_s=0, min_pause_s=0, keep_ended_s=10, max_runs=4, max_runs_per_user=3)
ALICE = Peer(os.getpid(), 1001, 1001)
BOB = Peer(os.getpid(), 1002, 1002)
HOT = Thermal(hot=True, cool=False, reason="hot")


class Session:
    def __init__(self, works: bool = True) -> None:
        self.events: list[Event] = []
        self.works = works

    def send(self, event: Event) -> bool:
        self.events.append(event)
        return self.works


def _attach(runs: AttachedRuns, peer: Peer, name: str | None = None, link: Session | None = None,
            **kw: object) -> tuple[Session, object]:
    session = link or Session()
    reply = runs.attach(Attach(pid=os.getpid(), argv=["python", "train.py"], name=name, **kw),  # type: ignore[arg-type]
                        peer, "alice" if peer is ALICE else "bob", session, CONFIG, {"resnet"}, 0.0, 1.0)
    return session, reply


def test_names_are_unique_among_trainers_and_runs_and_the_bounds_hold() -> None:
    runs = AttachedRuns()
    replies = [_attach(runs, ALICE, name)[1] for name in ("resnet", None, None, None)]
    assert [r.name for r in replies[:3]] == ["resnet-2", "train", "train-2"]  # type: ignore[attr-defined]
    assert replies[3].message == "too many attached runs of alice (3)"  # type: ignore[attr-defined]
    assert _attach(runs, BOB)[1].ok  # type: ignore[attr-defined]
    assert _attach(runs, BOB)[1].message == "too many attached runs (4)"  # type: ignore[attr-defined]


def test_a_hot_tick_sends_pause_on_the_session_and_a_broken_session_detaches_the_run() -> None:
    runs = AttachedRuns()
    session, reply = _attach(runs, ALICE, "a", Session(works=False))
    runs.tick(None, lambda gpus: HOT, CONFIG, 1.0)
    assert session.events == [Event("pause", "hot")]
    (run,) = runs.runs.values()
    assert run.link is None  # the send failed: detached from now on
    (state,) = runs.states(1.0, 1000.0, None)
    assert (state.origin, state.user, state.command, state.phase) == ("attached", "alice", "python train.py",
                                                                      TrainerPhase.PAUSING)


def test_commands_wait_for_a_detached_runs_wrapper_and_a_known_run_id_reattaches() -> None:
    runs = AttachedRuns()
    first, reply = _attach(runs, ALICE, "a")
    run_id = reply.run_id  # type: ignore[attr-defined]
    runs.detach(run_id, first)
    (run,) = runs.find("a")
    runs.command(run, "pause")
    runs.tick(None, lambda gpus: Thermal(), CONFIG, 1.0)
    assert first.events == [] and run.commands == ["pause"]
    second, again = _attach(runs, ALICE, "a", run_id=run_id)
    assert again.ok and again.run_id == run_id and again.name == "a"  # type: ignore[attr-defined]
    runs.tick(None, lambda gpus: Thermal(), CONFIG, 2.0)
    assert second.events == [Event("pause", "manual pause")]
    assert runs.find(str(os.getpid())) == [run]  # by pid
    assert runs.find("\u00b2") == []  # a digit to str.isdigit, no pid (int() raised out of the command)


def test_another_users_run_id_is_not_taken_over() -> None:
    runs = AttachedRuns()
    _, reply = _attach(runs, ALICE, "a")
    _, theirs = _attach(runs, BOB, "b", run_id=reply.run_id)  # type: ignore[attr-defined]
    assert theirs.ok and theirs.name == "b" and len(runs.runs) == 2  # type: ignore[attr-defined]
    assert theirs.run_id != reply.run_id  # type: ignore[attr-defined]
    _, odd = _attach(runs, BOB, "c", run_id="../" + "x" * 100)
    assert odd.ok and odd.run_id.isalnum() and len(odd.run_id) == 16  # type: ignore[attr-defined]


def test_an_ended_run_stays_listed_keep_ended_s_then_is_dropped() -> None:
    runs = AttachedRuns()
    _, reply = _attach(runs, ALICE, "a")
    run_id = reply.run_id  # type: ignore[attr-defined]
    runs.receive(run_id, Beat(heartbeats=[{"pid": os.getpid(), "steps_total": 7, "updated_unix": 1.0}, {"x": 1}]))
    runs.receive(run_id, Exited(code=0, restarting=False))
    runs.tick(None, lambda gpus: Thermal(), CONFIG, 1.0)
    (state,) = runs.states(1.0, 1000.0, None)
    assert (state.phase, state.steps_total, state.pid) == (TrainerPhase.FINISHED, 7, None)
    runs.tick(None, lambda gpus: Thermal(), CONFIG, 11.5)
    assert runs.states(11.5, 1000.0, None) == [] and runs.trees() == {}


def test_the_wrappers_pid_names_its_run_while_its_session_is_open() -> None:
    runs = AttachedRuns()
    wrapper = Peer(os.getppid(), 1001, 1001)  # the peer that attached (`gpuwatch train`), the run's parent
    session = Session()
    reply = runs.attach(Attach(pid=os.getpid(), argv=["python", "train.py"], name="a"), wrapper, "alice", session,
                        CONFIG, set(), 0.0, 1.0)
    (run,) = runs.find(str(os.getppid()))
    assert run.name == "a" and runs.find(str(os.getpid())) == [run]
    runs.detach(reply.run_id or "", session)  # the wrapper gone: its pid may be another process's soon
    assert runs.find(str(os.getppid())) == [] and runs.find(str(os.getpid())) == [run]


def test_a_declared_gpu_not_on_this_machine_is_dropped_and_the_reply_says_so() -> None:
    runs = AttachedRuns()
    here = frozenset({"0000:28:00.0"})

    def attach(gpus: list[str], name: str) -> object:
        return runs.attach(Attach(pid=os.getpid(), argv=["python", "train.py"], name=name, gpus=gpus), ALICE,
                           "alice", Session(), CONFIG, set(), 0.0, 1.0, here)

    typo = attach(["0000:2d:00.0"], "typo")
    assert typo.ok and typo.message == (  # type: ignore[attr-defined]
        "--gpu 0000:2d:00.0: not a GPU of this machine (0000:28:00.0); its limits apply to the GPUs it uses "
        "(every GPU until it is seen using one)")
    both = attach(["0000:28:00.0", "0000:2d:00.0"], "both")
    assert both.message.endswith("; its limits apply to its other --gpu")  # type: ignore[attr-defined]
    fine = attach(["0000:28:00.0"], "fine")
    assert fine.ok and fine.message == ""  # type: ignore[attr-defined]
    assert {r.name: r.gpus for r in runs.runs.values()} == {"typo": (), "both": ("0000:28:00.0",),
                                                            "fine": ("0000:28:00.0",)}
    runs.tick(None, lambda gpus: HOT if gpus in ((), ("0000:28:00.0",)) else Thermal(), CONFIG, 1.0)
    assert {s.name: s.phase for s in runs.states(1.0, 1000.0, None)} == dict.fromkeys(("typo", "both", "fine"),
                                                                                     TrainerPhase.PAUSING)


def test_the_tree_is_walked_every_tree_every_s_and_a_pid_named_meanwhile_is_looked_for_at_once() -> None:
    """The run's pid is checked every tick, its descendants (a whole /proc scan) every TREE_EVERY_S."""
    runs = AttachedRuns()
    _attach(runs, ALICE, "a")
    (run,) = runs.runs.values()
    runs.tick(None, lambda gpus: Thermal(), CONFIG, 100.0)
    child = subprocess.Popen(["sleep", "30"])
    try:
        runs.tick(None, lambda gpus: Thermal(), CONFIG, 100.0 + TREE_EVERY_S / 2)
        assert child.pid not in run.tree  # not walked yet
        assert runs.find(str(child.pid)) == [run]  # named to the CLI: a fresh walk finds it
        assert child.pid in run.tree
        runs.tick(None, lambda gpus: Thermal(), CONFIG, 101.0)  # walked (the CLI's walk had no clock)
        child.kill()
        child.wait()
        runs.tick(None, lambda gpus: Thermal(), CONFIG, 101.5)
        assert child.pid in run.tree  # still the last walk's
        runs.tick(None, lambda gpus: Thermal(), CONFIG, 101.0 + TREE_EVERY_S)
        assert child.pid not in run.tree and os.getpid() in run.tree  # walked again: the child is gone (the
        # worker may hold other tests' children meanwhile)
    finally:
        child.kill()
        child.wait()


def test_a_run_whose_pid_started_at_another_time_is_another_process_gone() -> None:
    """The pid is checked every tick by its start time in /proc (orphans.started_at): a pid reused by another
    process is not the run, which is gone; a pid not there at all is gone too."""
    runs = AttachedRuns()
    _attach(runs, ALICE, "a")
    (run,) = runs.runs.values()
    assert run.created == started_at(os.getpid()) and run.created is not None
    runs.tick(None, lambda gpus: Thermal(), CONFIG, 1.0)
    assert run.tree[:1] == [os.getpid()]
    run.created += 1  # as if the pid had been another process's when it attached
    runs.tick(None, lambda gpus: Thermal(), CONFIG, 2.0)
    assert run.tree == []
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: its pid is nobody's
    assert started_at(child.pid) is None
