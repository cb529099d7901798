"""Start a server: `serve` in the foreground (`python -m export serve`), or in a thread.

The server's packages are the optional extra `serve` (`pip install -e
".[serve]"`: Starlette, uvicorn, prometheus-client).  This module imports
none of them, nor TensorFlow, until a server starts, so that the command
line and the main job can check for the extra and say in one line what to
install.
"""

import importlib.util
import logging
import sys

#: The modules of the `serve` extra (setup.py).
SERVE_EXTRA = ("starlette", "uvicorn", "prometheus_client")
INSTALL = 'pip install -e ".[serve]"'


def missing_extra():
    """The first module of the `serve` extra that is not installed, or None."""
    return next((name for name in SERVE_EXTRA if importlib.util.find_spec(name) is None), None)


def check_extra():
    """Raises ModuleNotFoundError (naming the install command) without the extra."""
    missing = missing_extra()
    if missing is not None:
        raise ModuleNotFoundError(f"The server needs the serve extra ({missing} is not "
                                  f"installed): {INSTALL}", name=missing)


def _server(options):
    check_extra()
    # Imported here: without the extra, the line above says what to install.
    from export.server.runtime import Server

    return Server(options)


def log_to_stderr(level=logging.INFO):
    """The server's log lines (`export.server`) on stderr, one line each."""
    logger = logging.getLogger("export.server")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s server: %(message)s",
                                               "%Y-%m-%d %H:%M:%S"))
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def serve(options):
    """Serves `options` (a `ServerOptions`) until SIGTERM; returns the exit status."""
    log_to_stderr()
    return _server(options).run()


def start_server(options, timeout=600):
    """A server of `options` serving from a thread of its own, once it listens:
    `with start_server(options) as server: ... server.url ...`."""
    return _server(options).start(timeout)
