#!/usr/bin/env bash
# Type-checks the package, then runs the test suite in .venv; a mypy error fails the run, and so does
# pytest's "no tests collected" (5).
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m mypy || exit 1
.venv/bin/python -m pytest -q "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit $rc
