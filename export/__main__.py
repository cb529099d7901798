"""`python -m export ...`: see cli/export_commands.py."""

import sys

from cli.export_commands import main

if __name__ == "__main__":
    sys.exit(main())
