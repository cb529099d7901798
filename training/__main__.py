"""`python -m training`: see training/cli/commands.py."""

import sys

from training.cli.commands import main

sys.exit(main())
