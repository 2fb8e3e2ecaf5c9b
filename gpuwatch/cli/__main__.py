"""`python -m gpuwatch.cli` runs the CLI (as the benchmarks and tests start the daemon)."""

import sys

from gpuwatch.cli import main

sys.exit(main())
