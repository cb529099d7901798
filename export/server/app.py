"""TensorFlow Serving's REST API as an ASGI application (Starlette).

| method and path | answer |
|---|---|
| `POST /v1/models/NAME[/versions/N]:predict` | `{"predictions": ...}` or `{"outputs": ...}` (`export.server.predict_request`) |
| `GET /v1/models/NAME[/versions/N]` | `{"model_version_status": [...]}` |
| `GET /v1/models/NAME[/versions/N]/metadata` | `{"model_spec": ..., "metadata": {"signature_def": ...}}` |
| `GET /monitoring/prometheus/metrics` | the metrics (`export.server.metrics`) |
| `GET /readyz` | 200 `{"ready": true}` once every model has a version in service, else 503 |
| `GET /` | a page to try the models (`export.server.page`) |

A predict request is read (at most `max_body_bytes`; 413 past it), parsed
and checked in a worker thread (JSON, the signature's inputs: nothing heavy
on the event loop), keyed (its sentences' word pieces counted with those of
the requests beside it, `PieceCounter`), queued in its signature's `Batcher`, and
answered when its batch has run, its deadline has passed (504) or its
client has gone (the request leaves the queue).  Every failure is
`{"error": "..."}` with the status `export.server.errors` lists.
"""

import asyncio
import json
import logging
import re
import time
import weakref

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from export.server.batch_keys import PieceCounter
from export.server.errors import (
    RequestError,
    bad_request,
    deadline_exceeded,
    not_allowed,
    not_found,
    too_large,
)
from export.server.page import page_html
from export.server.predict_request import (
    predict_response,
    read_json_body,
    read_predict,
    signature_name,
)

LOG = logging.getLogger("export.server")
_PATH = re.compile(r"(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
                   r"(?::(?P<verb>[A-Za-z]+)|/(?P<metadata>metadata))?")
CLIENT_GONE = 499  # nginx's code for a client that closed the connection


def json_response(document, status=200):
    """JSON as TensorFlow Serving writes it (UTF-8, NaN and Infinity kept)."""
    body = json.dumps(document, ensure_ascii=False, allow_nan=True).encode("utf-8")
    return Response(body, status_code=status, media_type="application/json")


class RestApi:
    """The handlers, over the server's `ModelManager`, executors and metrics.

    Args:
        server: What the handlers read: `.options`, `.manager`, `.metrics`,
            `.prepare` (the executor that parses requests), `.draining`.
    """

    def __init__(self, server):
        self.server = server
        self.options = server.options
        self._counters = weakref.WeakKeyDictionary()  # ServedVersion -> PieceCounter

    def routes(self):
        return [Route("/", self.page, methods=["GET"]),
                Route("/readyz", self.ready, methods=["GET"]),
                Route(self.options.metrics_path, self.scrape, methods=["GET"]),
                Route("/v1/models/{path:path}", self.models, methods=["GET", "POST"])]

    async def page(self, request):
        return HTMLResponse(page_html(self.server.manager))

    async def ready(self, request):
        ready = self.server.manager.ready() and not self.server.draining
        return json_response({"ready": ready}, 200 if ready else 503)

    async def scrape(self, request):
        body, content_type = self.server.metrics.exposition()
        return Response(body, media_type=content_type)

    async def models(self, request):
        started = time.monotonic()
        api, name, failure = "unknown", "", ""
        try:
            match = _PATH.fullmatch(request.path_params["path"])
            if match is None:
                raise not_found(f"Malformed request: {request.url.path!r} is not "
                                f"/v1/models/NAME[/versions/N][:predict|/metadata].")
            name, verb = match["name"], match["verb"]
            if match["label"] is not None:
                raise not_found(f"Version labels are not served (label "
                                f"{match['label']!r}); name a version: /versions/N.")
            version = _version(match["version"])
            api = "predict" if verb else ("get_model_metadata" if match["metadata"]
                                          else "get_model_status")
            wanted = "POST" if verb else "GET"
            if request.method != wanted:
                raise not_allowed(f"{request.url.path} answers {wanted}, not "
                                  f"{request.method}.")
            if verb and verb != "predict":
                raise not_found(f"Only :predict is served, not :{verb} (the exports' "
                                f"signatures are predict signatures).")
            if verb:
                response = await self.predict(request, name, version, started)
            elif match["metadata"]:
                response = json_response(self.server.manager.version(name, version)
                                         .servable.metadata())
            else:
                response = json_response(self.server.manager.status(name, version))
        except RequestError as error:
            response = json_response(error.body, error.status)
        except Exception as error:  # noqa: BLE001  (a bug: answered, and logged below)
            failure = f" ({type(error).__name__}: {' '.join(str(error).split())})"
            response = json_response({"error": f"Internal error: {type(error).__name__}"},
                                     500)
        status = response.status_code
        seconds = time.monotonic() - started
        self.server.metrics.answered(name, api, status, seconds)
        if self.options.log_requests or failure:  # one line a request at most
            LOG.log(logging.ERROR if failure else logging.INFO, "%s %s %d %.1f ms%s",
                    request.method, request.url.path, status, seconds * 1e3, failure)
        return response

    async def predict(self, request, name, version, started):
        served = self.server.manager.version(name, version)
        body = await self._body(request)
        loop = asyncio.get_running_loop()
        signature, parsed = await loop.run_in_executor(
            self.server.prepare, _prepare, served.servable, body)
        key = None
        if self.options.batching is not None:
            sentences = signature.keys.sentences(parsed.inputs)
            counts = None if sentences is None else await self._counter(served).count(
                sentences)
            key = signature.batch_key(parsed.inputs, counts)
        deadline = started + self.options.timeout_ms / 1000
        batcher = served.batchers[signature.name]
        task = batcher.submit(parsed.inputs, parsed.rows, key, deadline)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({task.future, gone}, timeout=max(deadline - time.monotonic(), 0),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not task.future.done():
            batcher.cancel(task)
            if gone.done() and not gone.cancelled():
                return Response(status_code=CLIENT_GONE)
            raise deadline_exceeded(f"Deadline exceeded: no answer within "
                                    f"{self.options.timeout_ms} ms (rest_api_timeout_in_ms).")
        outputs = task.future.result()  # a RequestError is raised here
        return json_response(predict_response(outputs, parsed.columnar))

    def _counter(self, served):
        """The `PieceCounter` of a version in service (one per version)."""
        counter = self._counters.get(served)
        if counter is None:
            counter = PieceCounter(served.servable.keys.lengths, self.server.prepare)
            self._counters[served] = counter
        return counter

    async def _body(self, request):
        limit = self.options.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise too_large(f"The request body has {int(length)} bytes; at most {limit} "
                            f"are read (rest_api_max_body_bytes).")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(f"The request body exceeds {limit} bytes "
                                    f"(rest_api_max_body_bytes).")
                chunks.append(chunk)
        except ClientDisconnect:
            raise RequestError(CLIENT_GONE, "The client disconnected.") from None
        return b"".join(chunks)


async def _disconnected(request):
    """Returns when the client has closed the connection."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _version(text):
    if text is None:
        return None
    if not text.isdigit():
        raise bad_request(f"Malformed request: version {text!r} is not a version number.")
    return int(text)


def _prepare(servable, body):
    """In a worker thread: the body's signature and its `PredictRequest`."""
    document = read_json_body(body)
    name = signature_name(document)
    signature = servable.signatures.get(name)
    if signature is None:
        raise not_found(f"Serving signature name: {name!r} not found in signature def; the "
                        f"model's signatures are {', '.join(sorted(servable.signatures))}.")
    return signature, read_predict(document, signature.inputs)


def build_app(server, lifespan):
    """The Starlette application of `server` (see `export.server.main.Server`)."""
    return Starlette(routes=RestApi(server).routes(), lifespan=lifespan)
