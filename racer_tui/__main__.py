"""`python -m racer_tui`: the same as the `racer-tui` command."""

import sys

from racer_tui.cli import main

sys.exit(main())
