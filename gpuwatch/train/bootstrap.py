"""Start the launcher in any interpreter, one whose environment lacks gpuwatch included (stdlib only).

``gpuwatch train -- /path/to/train-venv/bin/python train.py`` runs the user's interpreter, whose
virtualenv has its own torch and no gpuwatch: ``python -m gpuwatch.launch`` there fails with "No
module named 'gpuwatch'" (issue 32). So ``gpuwatch train`` runs this file by its path instead
(``argv.build_launch_argv``): it imports the gpuwatch it belongs to (``own_gpuwatch``, which the
injected sitecustomize uses as well), and starts the launcher. Without torch in that interpreter it
prints one line naming the extra to install, not a traceback.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../gpuwatch
NO_TORCH_EXIT = 1


def own_gpuwatch() -> ModuleType:
    """The gpuwatch package this file belongs to, imported by its path (whatever ``sys.path`` holds)."""
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


def main() -> int:
    # Run as a file, this folder is sys.path[0]: its modules (launch, patch...) must not shadow the
    # user's. The launcher then sets sys.path[0] as ``python SCRIPT`` / ``python -m`` would have.
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = os.getcwd()
    if importlib.util.find_spec("torch") is None:
        print(f"gpuwatch train: {sys.executable} has no torch: pip install 'gpuwatch[train]' "
              "(or install torch into that environment)", file=sys.stderr)
        return NO_TORCH_EXIT
    own_gpuwatch()
    from gpuwatch.train.launch import main as launch

    return launch(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
