"""`python -m gpuwatch` runs the CLI."""

import sys

from gpuwatch.cli import main

sys.exit(main())
