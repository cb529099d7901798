"""`python -m training`: see cli/training_commands.py."""

from cli.process import exit_now
from cli.training_commands import main

exit_now(main())
