"""``python -m collector``: the same as ``sevents-collector``."""

import sys

from collector.cli import main

if __name__ == "__main__":  # importing the module (as tools that walk the package do) runs nothing
    sys.exit(main())
