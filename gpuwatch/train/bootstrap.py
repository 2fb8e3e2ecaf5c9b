"""Start the launcher in any interpreter, one whose environment lacks gpuwatch included (stdlib only).

``gpuwatch train -- python train.py`` runs the interpreter the user's shell means (an activated venv's),
whose environment has its own torch and often no gpuwatch: ``python -m gpuwatch.launch`` there fails with
"No module named 'gpuwatch'" (issue 32). So ``gpuwatch train`` runs this file by its path instead
(``argv.build_launch_argv``): it imports the gpuwatch it belongs to (``own_gpuwatch``, which the injected
sitecustomize uses as well) as that one package, by its file location, without putting gpuwatch's
site-packages on ``sys.path`` (the daemon's environment's other packages never shadow the user's), and starts
the launcher. An interpreter that cannot run gpuwatch (too old, no torch) gets one line, not a traceback.

This file must parse on any Python an activated environment may hold (2.7 and 3.x): no f-strings, no
annotations (type comments instead), no ``from __future__ import annotations``; the version check comes first.
"""

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../gpuwatch
NO_TORCH_EXIT = 1
OLDEST = (3, 11)  # pyproject.toml's requires-python


def interpreter_problem(version, executable, has_torch):
    # type: (tuple[int, ...], str, bool) -> str | None
    """Why ``executable`` cannot run the launcher, as the one line to print; None when it can."""
    if tuple(version[:2]) < OLDEST:
        return ("gpuwatch train: " + executable + " is Python " + ".".join(str(part) for part in version[:2])
                + ": gpuwatch's launcher needs Python " + ".".join(str(part) for part in OLDEST) + " or newer "
                "(give such an interpreter as a path: -- /path/to/venv/bin/python SCRIPT)")
    if not has_torch:
        return ("gpuwatch train: " + executable + " has no torch: install torch into that environment, or give "
                "an interpreter that has it as a path (-- /path/to/venv/bin/python SCRIPT)")
    return None


def own_gpuwatch():  # type: () -> object
    """The gpuwatch package this file belongs to, imported by its path (whatever ``sys.path`` holds)."""
    import importlib.util

    loaded = sys.modules.get("gpuwatch")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(
        "gpuwatch", os.path.join(_PACKAGE_DIR, "__init__.py"), submodule_search_locations=[_PACKAGE_DIR])
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules["gpuwatch"] = package
    spec.loader.exec_module(package)
    return package


def main():  # type: () -> int
    # Run as a file, this folder is sys.path[0]: its modules (launch, patch...) must not shadow the
    # user's. The launcher then sets sys.path[0] as ``python SCRIPT`` / ``python -m`` would have.
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = os.getcwd()
    has_torch = False
    if sys.version_info[:2] >= OLDEST:
        import importlib.util

        has_torch = importlib.util.find_spec("torch") is not None
    problem = interpreter_problem(sys.version_info[:2], sys.executable, has_torch)
    if problem is not None:
        sys.stderr.write(problem + "\n")
        return NO_TORCH_EXIT
    own_gpuwatch()
    from gpuwatch.train.launch import main as launch

    return launch(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
