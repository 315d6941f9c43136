"""``python -m collector``: the same as ``sevents-collector``."""

import sys

from collector.cli import main

sys.exit(main())
