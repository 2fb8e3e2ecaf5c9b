"""An attached run on /metrics: the trainer families; origin and job_id on gpuwatch_trainer_info, never its user
(/metrics is read by anyone: publish/redact.py)."""

from __future__ import annotations

from gpuwatch.model import TrainerPhase, TrainerState
from gpuwatch.publish.control_metrics import trainer_families


def test_an_attached_run_is_a_trainer_with_its_origin_and_job_never_its_user() -> None:
    runs = (TrainerState(name="resnet", phase=TrainerPhase.RUNNING),
            TrainerState(name="train-2", phase=TrainerPhase.PAUSED, origin="attached", user="alice",
                         command="python train.py", job_id="77"))
    families = {family.name: family for family in trainer_families(runs, ["0000:28:00.0"])}
    info = {s.labels["trainer"]: s.labels for s in families["gpuwatch_trainer_info"].samples}
    assert info["resnet"] == {"trainer": "resnet", "gpus": "", "origin": "configured", "job_id": ""}
    assert info["train-2"] == {"trainer": "train-2", "gpus": "", "origin": "attached", "job_id": "77"}
    held = {s.labels["phase"]: s.value for s in families["gpuwatch_trainer_phase"].samples
            if s.labels["trainer"] == "train-2"}
    assert held["paused"] == 1 and held["running"] == 0
