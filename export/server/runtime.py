"""The running server: uvicorn, the threads, the models, start and stop.

`Server(options)` holds everything one server needs: the `ModelManager`,
the batch threads (`num_batch_threads` with batching, else
`rest_api_num_threads`), the threads that parse requests, the metrics and
the ASGI application.  It binds its socket first (a port in use is an
OSError at once, and port 0 picks a free one), but listens only after the
lifespan's start-up has loaded and warmed every model's versions, as
`tensorflow_model_server` opens its ports only once its models are loaded.

`run()` serves in the calling (main) thread until SIGTERM or SIGINT, then
shuts down gracefully: no new connections, every request in flight
answered (its batch run), the threads joined; it returns 0 after SIGTERM
and 130 after SIGINT.  `start()` serves from a thread of its own and
returns once the server listens (tests, the main job, the benchmark);
`stop()` shuts it down the same way.
"""

import asyncio
import concurrent.futures
import contextlib
import logging
import signal
import socket
import threading
import time

import tensorflow as tf
import uvicorn

from export.server.app import build_app
from export.server.batcher import BatchPolicy, BatchThreads
from export.server.metrics import ServerMetrics
from export.server.model_manager import ModelManager

LOG = logging.getLogger("export.server")
#: Exit status after SIGINT (128 + SIGINT, as `cli.errors.INTERRUPTED`).
INTERRUPTED = 130

# Seconds an idle kept-alive connection stays open.  A connection is closed
# by a timer on the server's clock: if the whole process stalls past it (a
# long garbage collection, a call that holds the GIL, the host paging), the
# timer fires before a request the client sent meanwhile is read, and that
# request is reset unanswered.  60 s, as a load balancer's idle timeout, so
# only a stall of a minute can do that (uvicorn's default of 5 s was hit in
# `tests/test_server_load.py` by a stall of a few seconds).
KEEP_ALIVE_S = 60


def batch_policy(options):
    """The `BatchPolicy` of `options`: TensorFlow Serving's batching, or each
    request alone (as many queued as ten per thread)."""
    batching = options.batching
    if batching is None:
        return BatchPolicy(max_batch_size=1, timeout_s=0.0,
                           max_queued=10 * options.num_threads, single=True)
    return BatchPolicy(batching.max_batch_size, batching.batch_timeout_micros / 1e6,
                       batching.max_queued_rows)


def _listening_socket(host, port):
    """A bound TCP socket for `host:port`, created with IPPROTO_TCP: asyncio
    turns Nagle's algorithm off (TCP_NODELAY) only on sockets of that
    protocol, and without it an answer written in two parts (headers, body)
    waits 40 ms for the client's delayed acknowledgement."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise OSError(error.errno, f"Cannot listen on {host}:{port} "
                      f"(--rest_api_host, --rest_api_port): {error.strerror}") from None
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, telling `Server` when it is asked to stop, and ending
    without re-raising the signal (so that SIGTERM exits 0)."""

    def __init__(self, config, owner):
        super().__init__(config)
        self.owner = owner

    def handle_exit(self, sig, frame):
        self.owner.received = sig
        self.owner.draining = True
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in signals}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class Server:
    """One server of `options` (a `ServerOptions`)."""

    def __init__(self, options):
        self.options = options
        self.draining = False
        self.received = None
        if options.intra_op_threads:
            tf.config.threading.set_intra_op_parallelism_threads(options.intra_op_threads)
        if options.inter_op_threads:
            tf.config.threading.set_inter_op_parallelism_threads(options.inter_op_threads)
        policy = batch_policy(options)
        count = options.batching.num_batch_threads if options.batching else options.num_threads
        self.threads = BatchThreads(count)
        self.prepare = concurrent.futures.ThreadPoolExecutor(
            max(2, min(count, 8)), thread_name_prefix="prepare")
        self.metrics = ServerMetrics()
        self.manager = ModelManager(options, self.threads, policy, self._batch_ran)
        self.metrics.watch(self.manager)
        self.app = build_app(self, self._lifespan)
        self.socket = _listening_socket(options.host, options.port)
        self.port = self.socket.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_config=None, log_level="warning", access_log=False,
            lifespan="on", timeout_graceful_shutdown=options.timeout_ms / 1000 + 5,
            timeout_keep_alive=KEEP_ALIVE_S)
        self._uvicorn = _Uvicorn(config, self)
        self._thread = None

    @property
    def url(self):
        host = self.options.host if ":" not in self.options.host else f"[{self.options.host}]"
        return f"http://{host}:{self.port}"

    def _batch_ran(self, model, signature, rows, requests, seconds, waited):
        self.metrics.batch_ran(model, signature, rows, requests, seconds, waited)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        await self.manager.poll()
        for name, versions in self.manager.served.items():
            if not versions:
                LOG.warning("model %r: no version to serve under %r yet; polling for one",
                            name, self.manager.sources[name].base_path)
        poller = asyncio.create_task(self.manager.poll_forever())
        LOG.info("serving %s on %s", ", ".join(sorted(self.manager.sources)), self.url)
        try:
            yield
        finally:
            self.draining = True
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
            self.manager.shutdown()
            self.threads.shutdown()
            self.prepare.shutdown(wait=True)

    async def _serve(self):
        await self._uvicorn.serve(sockets=[self.socket])

    def run(self):
        """Serves until SIGTERM (returns 0) or SIGINT (returns 130)."""
        asyncio.run(self._serve())
        if not self._uvicorn.started:
            raise RuntimeError("The server stopped before it started; see the log above.")
        return INTERRUPTED if self.received == signal.SIGINT else 0

    def start(self, timeout=600):
        """Serves from a thread; returns self once it listens.

        Raises:
            RuntimeError: If it has not started within `timeout` seconds, or
                stopped while starting.
        """
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),),
                                        name="server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive():
                raise RuntimeError("The server stopped while starting; see the log.")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"The server did not start within {timeout} s.")
            time.sleep(0.02)
        return self

    def stop(self, timeout=120):
        """Shuts down gracefully (requests in flight answered); waits for it."""
        self.draining = True
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"The server did not stop within {timeout} s.")
        self.socket.close()

    def __enter__(self):
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc_info):
        self.stop()
