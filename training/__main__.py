"""`python -m training`: see cli/training_commands.py."""

import sys

from cli.training_commands import main

sys.exit(main())
