#!/usr/bin/env bash
# Runs the test suite in .venv; pytest's "no tests collected" (5) is not a success here.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit $rc
