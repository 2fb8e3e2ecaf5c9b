"""An attached run's line in `gpuwatch status`: its origin, user and Slurm job (cli/trainer_rows.py)."""

from __future__ import annotations

from pathlib import Path

from gpuwatch.cli.status import render
from gpuwatch.publish.document import to_document
from tests.support.published import NOW_UNIX, example_state


def test_an_attached_runs_line_names_its_user_and_job_a_configured_one_stays_as_it_was(tmp_path: Path) -> None:
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    configured = next(line for line in render(doc, NOW_UNIX).splitlines() if line.startswith("trainer resnet"))
    trainer = doc["trainers"][0]
    trainer.update(origin="attached", user="alice", job_id="4242", command="python train.py")
    attached = next(line for line in render(doc, NOW_UNIX).splitlines() if line.startswith("trainer resnet"))
    assert attached.startswith("trainer resnet: running  [attached, alice, job 4242]  pid "), attached
    assert configured.startswith("trainer resnet: running  pid "), configured
    trainer.update(job_id=None, user=None)
    alone = next(line for line in render(doc, NOW_UNIX).splitlines() if line.startswith("trainer resnet"))
    assert "  [attached]  pid " in alone


def test_a_failed_attached_run_does_not_make_status_exit_1(tmp_path: Path) -> None:
    from gpuwatch.cli.status import exit_code

    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    assert doc["daemon"]
    doc["daemon"].update(failures=[])
    doc["gpus"] = [gpu for gpu in doc["gpus"] if exit_code({**doc, "gpus": [gpu], "trainers": []}) == 0][:1]
    doc["trainers"] = [{**doc["trainers"][0], "phase": "failed", "stuck_pids": []}]
    assert exit_code(doc) == 1  # a configured trainer given up on
    doc["trainers"][0]["origin"] = "attached"
    assert exit_code(doc) == 0  # a user's script that exited non-zero


def test_the_exit_and_the_rate_read_as_the_user_sees_them(tmp_path: Path) -> None:
    """Issue 50 item 15: `stop` gave `exited with 143` in the wrapper and `last exit -15` in status; after a
    resume, `5.77 steps/s  last step 27s ago` read as a run stepping now."""
    from gpuwatch.cli.trainer_rows import exit_text

    assert [exit_text(code) for code in (0, 1, -15, -9, -99)] == ["0", "1", "SIGTERM (143)", "SIGKILL (137)",
                                                                  "signal 99 (227)"]
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    trainer = doc["trainers"][0]

    def line() -> str:
        return next(row for row in render(doc, NOW_UNIX).splitlines() if row.startswith("trainer resnet"))

    trainer.update(last_exit_code=-15, steps_per_s=5.77, last_step_age_s=27.0)
    assert "  last exit SIGTERM (143)" in line()
    assert "  5.77 steps/s until its last step, 27s ago" in line()
    trainer.update(last_step_age_s=1.0)
    assert "  5.77 steps/s  last step 1s ago" in line()
    trainer.update(steps_per_s=0.05, last_step_age_s=30.0)  # a slow run between two steps: its rate is current
    assert "  0.05 steps/s  last step 30s ago" in line()
