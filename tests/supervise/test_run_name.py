"""An attached run's default name (issue 47): a script's file name, ``-m``'s module, else the interpreter's or
program's own name, through wrappers; never code (``-c``) nor an option's or argument's value."""

from __future__ import annotations

import pytest

from gpuwatch.supervise.run_name import default_name

CODE = "from trainlib import main; main('swordfish42')"


@pytest.mark.parametrize(("argv", "name"), [
    # Python itself: the script's stem, -m's module, else the interpreter.
    (["python", "train.py", "--lr", "3e-4"], "train"),
    (["python3", "-u", "-W", "ignore", "/home/u/exp/train.py"], "train"),
    (["python3", "-Wignore", "-X", "dev", "train.py"], "train"),
    (["python3", "-m", "mypkg.trainer", "--data", "/srv/x.py"], "trainer"),
    (["python3", "-um", "mypkg.trainer"], "trainer"),
    (["python3", "-mmypkg.trainer"], "trainer"),
    (["python3", "-c", CODE], "python3"),
    (["python3", "-uc", CODE], "python3"),
    (["/usr/bin/python3.11", "-c", CODE, "train.py"], "python3.11"),
    (["python3"], "python3"),
    (["python3", "-", "x.py"], "python3"),
    # Wrappers: their options and values, env's assignments, never a name.
    (["env", "python3", "-c", CODE], "python3"),
    (["env", "-i", "SECRET=swordfish42", "-u", "HOME", "python3", "train.py"], "train"),
    (["env", "-C", "/home/alice/exp", "python3", "-c", CODE], "python3"),
    (["nohup", "python3", "train.py"], "train"),
    (["sudo", "-u", "alice", "python3", "-c", CODE], "python3"),
    (["sudo", "-u", "alice", "./mytrainer", "--token", "swordfish42"], "mytrainer"),
    (["nice", "-n", "10", "ionice", "-c", "3", "python3", "-m", "exp.run"], "run"),
    (["taskset", "0x3", "python3", "train.py"], "train"),
    (["uv", "run", "--with", "torch", "python", "train.py"], "train"),
    (["env", "--", "python3", "train.py"], "train"),
    (["env"], "env"),
    # Shells: the script's file name, never -c's code.
    (["bash", "-c", "python3 train.py --token swordfish42"], "bash"),
    (["bash", "-lc", "python3 train.py"], "bash"),
    (["sh", "-e", "/home/alice/run.sh", "swordfish42"], "run.sh"),
    (["bash", "-o", "pipefail", "--rcfile", "swordfish42", "train.sh"], "train.sh"),
    (["nohup", "bash", "-c", CODE], "bash"),
    # Launchers: the script or module they run, never an option's value.
    (["torchrun", "--nproc-per-node", "2", "/home/u/exp/finetune llama.py"], "finetune-llama"),
    (["torchrun", "--nnodes", "1", "-m", "mypkg.train", "--secret", "swordfish42"], "train"),
    (["torchrun", "--no-python", "bash", "-c", CODE], "bash"),
    (["python3", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"], "train"),
    (["python", "-m", "torch.distributed.launch", "--rdzv-id", "swordfish42"], "launch"),
    (["accelerate", "launch", "--num_processes", "2", "train.py"], "train"),
    (["accelerate", "launch", "swordfish42"], "accelerate"),
    (["deepspeed", "--num_gpus", "2", "ds_train.py", "--deepspeed"], "ds_train"),
    (["srun", "-n", "2", "python3", "-c", CODE], "python3"),
    (["srun", "--ntasks", "2", "swordfish42"], "srun"),
    # Any other program: its own file name.
    (["./run.sh"], "run.sh"),
    (["/opt/bin/trainer", "--password", "swordfish42"], "trainer"),
    ([], "run"),
    ([""], "run"),
])
def test_default_names(argv: list[str], name: str) -> None:
    assert default_name(argv) == name
    assert "swordfish42" not in default_name(argv) and "trainlib" not in default_name(argv)
