"""`python -m nzjit ...`: the same command line as the `nzjit` console script (nzjit/cli.py)."""

import sys

from .cli import main

sys.exit(main())
