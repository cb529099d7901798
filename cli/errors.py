"""Errors a user can act on: one line on stderr and exit status 2, no traceback.

A bad config value, a missing or malformed data file, or a model size that
cannot be built (`hidden_dim` not divisible by `num_heads`) raises
`ValueError` or an `OSError` (`FileNotFoundError`, `FileExistsError`, ...)
whose message names the argument and the value.  The command lines of
`training` and `export` print that message as `error: <message>` and exit
with 2, the status argparse uses for a bad command line; `--debug` lets the
exception through with its traceback.  A missing optional package (a
`setup.py` extra such as ctranslate2) is reported the same way: its
`ModuleNotFoundError` names the install command.  The message is printed on
one line, whatever line breaks it holds.  Ctrl-C prints `interrupted` and
exits with 130 (a run resumes from its last checkpoint when its command is
repeated).
"""

import argparse
import sys
import warnings

#: Exceptions whose message is meant for the user.
USER_ERRORS = (ValueError, OSError)
#: Optional packages (setup.py extras) whose absence is the user's to fix.
OPTIONAL_MODULES = ("ctranslate2", "starlette", "uvicorn", "prometheus_client")
#: Exit status of a command that was refused.
USAGE_ERROR = 2
#: Exit status of a command stopped with Ctrl-C (128 + SIGINT, as a shell's).
INTERRUPTED = 130


def add_debug_flag(parser, subparsers=()):
    """`--debug` on `parser` and on each subparser, before or after the command.

    A subparser's default would overwrite the value parsed before the
    command (`python -m training --debug train`), so only the top level has
    a default.
    """
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error"
    )
    for sub in subparsers:
        sub.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="show the traceback of an error",
        )


def run_reporting_errors(command, debug=False):
    """`command()`, with a user error turned into `error: ...` and status 2.

    Args:
        command: A callable returning the exit status.
        debug: Re-raise instead, so that the traceback is printed.

    A warning meant for the user (a run written before run directories
    carried a format version, ...) is one `warning: ...` line too.

    Returns:
        The command's exit status, or `USAGE_ERROR`.
    """
    try:
        with warnings.catch_warnings():
            if not debug:
                warnings.showwarning = _warning_line
            return command()
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"error: {one_line(error)}", file=sys.stderr)
        return USAGE_ERROR
    except ImportError as error:
        if debug or error.name not in OPTIONAL_MODULES:
            raise
        print(f"error: {one_line(error)}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        if debug:
            raise
        print("interrupted", file=sys.stderr)
        return INTERRUPTED


def one_line(error):
    """The message of `error` on one line (a message that spans lines, as
    some of TensorFlow's do, joined); its type's name when it has none."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines) or type(error).__name__


def _warning_line(message, category, filename, lineno, file=None, line=None):
    """`warnings.showwarning` of the command line: `warning: <message>`, one line."""
    print(f"warning: {one_line(message)}", file=file or sys.stderr)
