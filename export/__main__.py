"""`python -m export ...`: see `export.cli`."""

import sys

from export.cli import main

if __name__ == "__main__":
    sys.exit(main())
