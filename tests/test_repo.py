"""The repository as a new user meets it: it stands alone, and `make test`'s setup says what it needs."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.support.paths import REPO

# A folder beside the checkout (the captures once lived in ../shared): nothing may point there.
OUTSIDE = re.compile(r"\.\./shared|(?<![\w.-])shared/")


def test_nothing_in_the_repository_points_outside_it() -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for name in listed.stdout.decode().split("\0"):
        path = REPO / name
        if not name or name == "tests/test_repo.py" or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        found += [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert found == []


def test_system_deps_without_root_or_sudo_names_the_packages() -> None:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run the script as another user")
    with tempfile.TemporaryDirectory() as empty:  # a PATH with `id` and nothing the script looks for
        os.chmod(empty, 0o755)
        os.symlink(shutil.which("id") or "/usr/bin/id", os.path.join(empty, "id"))
        script = (REPO / "scripts/install-system-deps.sh").read_bytes()
        done = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/bash", "-s"],
                              input=script, env={"PATH": empty}, capture_output=True, timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 1 and done.stdout == b""
    assert err.splitlines()[0].startswith("make test needs these Debian packages, and installing them needs root: ")
    assert "prometheus" in err and "prometheus-alertmanager" in err and "systemd" in err
    assert "  as root: apt-get install --no-install-recommends prometheus" in err


def test_the_torch_source_is_a_documented_knob_that_reaches_pip() -> None:
    readme = (REPO / "README.md").read_text()
    assert "TORCH_SPEC" in readme and "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in readme
    url = "https://download.pytorch.org/whl/cpu"
    planned = subprocess.run(["make", "-n", "-B", ".venv/.installed", f"TORCH_INDEX_URL={url}", "TORCH_SPEC=torch"],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    pip = next(line for line in planned.stdout.splitlines() if "pip install" in line and ".[test,train]" in line)
    assert pip.endswith(f"'torch' --extra-index-url '{url}'")
    default = subprocess.run(["make", "-n", "-B", ".venv/.installed"], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    assert "'torch==2.13.0'" in default.stdout and "--extra-index-url" not in default.stdout


def test_the_train_extra_brings_numpy() -> None:
    requires = importlib.metadata.requires("gpuwatch") or []
    assert any(r.startswith("numpy") and 'extra == "train"' in r for r in requires), requires
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed")
    done = subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1).numpy()"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "Failed to initialize NumPy" not in done.stderr, done.stderr


def test_every_module_says_its_one_job_in_its_docstring() -> None:
    """The package map is read from the code (docs/architecture.md "Package map", scripts/module-map.py): every
    module of gpuwatch opens with a docstring whose first sentence says its job, so a new module cannot be
    unmapped and no map row can go stale."""
    package = REPO / "gpuwatch"
    missing = []
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if not doc.split("\n", 1)[0].strip():
            missing.append(path.relative_to(package).as_posix())
    assert missing == [], "modules without a docstring saying their job"
    mapped = subprocess.run([sys.executable, str(REPO / "scripts/module-map.py"), "power"], capture_output=True,
                            text=True, timeout=60)
    assert mapped.returncode == 0 and "power/governor.py: " in mapped.stdout, mapped.stderr
