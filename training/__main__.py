"""`python -m training`: see training/cli/commands.py."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from training.cli.commands import main  # noqa: E402

sys.exit(main())
