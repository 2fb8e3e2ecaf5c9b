#!/usr/bin/env bash
# Type-checks the package, then runs the test suite in .venv; a mypy error fails the run, and so does
# pytest's "no tests collected" (5). -rs lists every skipped test with its reason in the log.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m mypy || exit 1
.venv/bin/python -m pytest -q -rs "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit $rc
