"""`python -m export ...`: see cli/export_commands.py."""

from cli.export_commands import main
from cli.process import exit_now

if __name__ == "__main__":
    exit_now(main())
