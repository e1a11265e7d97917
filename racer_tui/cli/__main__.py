"""`python -m racer_tui.cli`: what each textual-serve session runs."""

import sys

from racer_tui.cli import main

sys.exit(main())
