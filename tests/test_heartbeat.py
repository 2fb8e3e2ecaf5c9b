"""The trainer <-> daemon heartbeat and pause-file protocol (stdlib only)."""

from __future__ import annotations

from pathlib import Path

from gpuwatch.heartbeat import (
    Heartbeat,
    pause_reason,
    rank_heartbeat_path,
    read_heartbeat,
    read_rank_heartbeats,
    remove_heartbeats,
    request_pause,
    write_heartbeat,
)


def test_a_ranks_heartbeat_round_trips_beside_the_trainers(tmp_path: Path) -> None:
    main = tmp_path / "heartbeat.json"
    assert rank_heartbeat_path(main, 3) == tmp_path / "heartbeat.rank-3.json"
    beat = Heartbeat(pid=7, steps_total=12, last_step_unix=1.0, steps_per_s=2.5, updated_unix=2.0, paused=True,
                     rank=3, world_size=4, local_world_size=2, node="node-b", job="5eed", pause_seq=9, wants=True,
                     job_ranks_held=4, job_wanting=2, paused_by="node-a: hot", pg_timeout_s=600.0, backend="nccl",
                     restart_count=1)
    write_heartbeat(rank_heartbeat_path(main, 3), beat)
    write_heartbeat(main, Heartbeat(pid=8, steps_total=1, last_step_unix=None, steps_per_s=None, updated_unix=3.0))
    (tmp_path / "heartbeat.rank-9.json").write_text("{half a fi")
    assert read_rank_heartbeats(main) == [beat]  # the single-process file and a broken one are not ranks'
    assert read_heartbeat(main) == Heartbeat(pid=8, steps_total=1, last_step_unix=None, steps_per_s=None,
                                             updated_unix=3.0)
    remove_heartbeats(main)
    assert list(tmp_path.iterdir()) == []


def test_an_older_writers_heartbeat_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat.json"
    path.write_text('{"pid": 1, "steps_total": 5, "last_step_unix": null, "steps_per_s": null, "updated_unix": 1.5}')
    beat = read_heartbeat(path)
    assert beat is not None and beat.rank is None and beat.pause_seq == 0 and not beat.paused


def test_the_pause_file_carries_the_reason(tmp_path: Path) -> None:
    pause = tmp_path / "pause"
    assert pause_reason(pause) == "pause requested" and pause_reason(None) == "pause requested"
    request_pause(pause, "hot: 0000:03:00.0 junction 101°C >= 100°C\n")
    assert pause_reason(pause) == "hot: 0000:03:00.0 junction 101°C >= 100°C"
    pause.write_text("")  # `touch`ed by hand or by an older daemon
    assert pause_reason(pause) == "pause requested"
