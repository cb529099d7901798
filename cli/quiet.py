"""Quiet by default: the command line shows no TensorFlow start-up lines.

Importing TensorFlow writes lines to the process's standard error from C++
before its own log level applies ("All log messages before
absl::InitializeLog() ...", oneDNN's notice, "Could not find cuda
drivers", and on some machines a `failed call to cuInit` error), so a user
on a CPU machine reads several lines of noise before the first line they
asked for.  The commands therefore set `TF_CPP_MIN_LOG_LEVEL=3` and import
TensorFlow with file descriptor 2 pointed at a temporary file; what the
import wrote is shown only if the import fails.  `--debug`, or a
`TF_CPP_MIN_LOG_LEVEL` the user set, leaves everything as TensorFlow has it.
"""

import os
import sys
import tempfile

LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"


def quiet_tensorflow(debug=False):
    """Imports TensorFlow (and tensorflow-text) without its start-up lines.

    Returns:
        True if the start-up output was hidden, False if left as it is
        (`debug`, the user's own `TF_CPP_MIN_LOG_LEVEL`, or TensorFlow
        already imported).
    """
    if debug or LOG_LEVEL in os.environ or "tensorflow" in sys.modules:
        return False
    os.environ[LOG_LEVEL] = "3"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            # Imported here, with descriptor 2 redirected, and by a command that
            # runs: `--help` stays free of TensorFlow.
            import tensorflow  # noqa: F401
            import tensorflow_text  # noqa: F401
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return True
