"""Servers over the tiny exports of `export_fixtures`, for the server's tests.

`shared_server()` is one server per session (the translator and the
classifier, batching on, no polling) that the read-only tests share;
`running_server` starts one of a test's own (versions that change, other
limits), always on 127.0.0.1 and a free port, and always stops it.
`request_many` sends bodies from many concurrent clients with a bounded
timeout each, and returns every answer: what the load tests count.
"""

import asyncio
import atexit
import contextlib
import functools
import os
import shutil
import tempfile
import time

import httpx
import keras
import numpy as np
import tensorflow as tf

from export.saved_model import export_model
from export.server.config import BatchingParameters, ModelSource, ServerOptions
from export.server.main import start_server
from export.server.predict_request import predict_response
from keras_transformer.layers import PatchStem
from keras_transformer.models import TransformerClassifier, VisionTransformer
from tests.export_fixtures import exported_classifier, exported_translator

#: A batch of 8 rows at most, formed within 5 ms, one batch at a time.
BATCHING = BatchingParameters(max_batch_size=8, batch_timeout_micros=5000,
                              max_enqueued_batches=4, num_batch_threads=1)
#: The shared server reads bodies of at most 1 MiB (413 past it).
MAX_BODY_BYTES = 1 << 20
#: Seconds any one request of a test may take.
REQUEST_TIMEOUT = 60


def add_version(export_path, base_path, version):
    """Copies export `export_path` in as `base_path/<version>`, whole: into a
    hidden sibling first, then renamed, as an exporter writes it."""
    os.makedirs(base_path, exist_ok=True)
    staging = os.path.join(base_path, f".{version}.partial")
    shutil.copytree(export_path, staging)
    target = os.path.join(base_path, str(version))
    os.rename(staging, target)
    return target


@contextlib.contextmanager
def running_server(models, batching=BATCHING, **options):
    """A server of `models` ({name: base path}) on a free loopback port."""
    sources = tuple(ModelSource(name, path) for name, path in models.items())
    options.setdefault("poll_seconds", -1)
    server = start_server(ServerOptions(sources, port=0, batching=batching, **options),
                          timeout=300)
    try:
        yield server
    finally:
        server.stop(timeout=120)


@functools.cache
def _scratch():
    directory = tempfile.mkdtemp(prefix="keras-transformer-server-exports-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


@functools.cache
def exported_series():
    """A series classifier's SavedModel (untrained: one value a step)."""
    keras.utils.set_random_seed(0)
    model = TransformerClassifier(PatchStem(1, hidden_dim=8, max_sequence_length=16),
                                  num_classes=3, num_layers=1, num_heads=2,
                                  intermediate_dim=16)
    return export_model(model, os.path.join(_scratch(), "series"), label_names=["a", "b", "c"])


@functools.cache
def exported_images():
    """A `VisionTransformer`'s SavedModel (untrained: 8 x 8 x 3 images)."""
    keras.utils.set_random_seed(0)
    model = VisionTransformer(num_classes=2, image_size=8, patch_size=4, num_channels=3,
                              num_layers=1,
                              hidden_dim=8, num_heads=2, intermediate_dim=16)
    return export_model(model, os.path.join(_scratch(), "images"), label_names=["x", "y"])


EXPORTS = {"translator": exported_translator, "classifier": exported_classifier,
           "series": exported_series, "images": exported_images}


@functools.cache
def shared_server():
    """The session's server: `translator`, `classifier`, `series` and `images`,
    version 1 each."""
    root = tempfile.mkdtemp(prefix="keras-transformer-server-tests-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    models = {name: os.path.join(root, name) for name in EXPORTS}
    for name, export in EXPORTS.items():
        add_version(export(), models[name], 1)
    context = running_server(models, max_body_bytes=MAX_BODY_BYTES)
    server = context.__enter__()
    atexit.register(context.__exit__, None, None, None)
    return server


@functools.cache
def in_process(name):
    """The signatures of export `name` (a key of `EXPORTS`) loaded in this
    process: the answers the server must give."""
    import tensorflow as tf

    return tf.saved_model.load(EXPORTS[name]()).signatures


def solo(name, signature, inputs):
    """{output: numpy array} of one unbatched in-process call."""
    outputs = in_process(name)[signature](**{k: tf.constant(v) for k, v in inputs.items()})
    return {key: value.numpy() for key, value in outputs.items()}


def texts(sentences):
    """Sentences as a signature's `sentences` array (UTF-8 bytes)."""
    return np.array([sentence.encode("utf-8") for sentence in sentences], dtype=object)


def expected(name, signature, inputs, columnar=False):
    """The JSON answer one unbatched in-process call gives `inputs` ({input: array})."""
    return predict_response(solo(name, signature, inputs), columnar)


def assert_same_answer(served, reference, path="answer"):
    """`served` equals `reference` (JSON values): text, ids and labels exactly,
    floats to float32 rounding (a batch of another size sums in another order)."""
    if isinstance(reference, dict):
        assert isinstance(served, dict) and served.keys() == reference.keys(), (path, served)
        for key in reference:
            assert_same_answer(served[key], reference[key], f"{path}.{key}")
    elif isinstance(reference, list):
        assert isinstance(served, list) and len(served) == len(reference), (path, served)
        for i, (a, b) in enumerate(zip(served, reference, strict=True)):
            assert_same_answer(a, b, f"{path}[{i}]")
    elif isinstance(reference, float):
        assert isinstance(served, (int, float)), (path, served)
        np.testing.assert_allclose(served, reference, rtol=1e-4, atol=1e-5, err_msg=path)
    else:
        assert served == reference, (path, served, reference)


def client(server):
    return httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT)


def request_many(url, requests, clients, timeout=REQUEST_TIMEOUT):
    """Sends `requests` ([(method, path, body bytes or JSON value)]) from
    `clients` concurrent clients; returns [(status, JSON or None, seconds)]
    in the order given (status None: no answer, the error's name in place of
    the JSON)."""
    async def main():
        answers = [None] * len(requests)
        queue = asyncio.Queue()
        for item in enumerate(requests):
            queue.put_nowait(item)
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http:
            async def worker():
                while not queue.empty():
                    index, (method, path, body) = queue.get_nowait()
                    started = time.monotonic()
                    content = body if isinstance(body, bytes) else None
                    try:
                        response = await http.request(
                            method, path, content=content,
                            json=None if content is not None or body is None else body)
                        answers[index] = (response.status_code, _json(response),
                                          time.monotonic() - started)
                    except httpx.HTTPError as error:
                        answers[index] = (None, type(error).__name__,
                                          time.monotonic() - started)

            await asyncio.gather(*(worker() for _ in range(clients)))
        return answers

    return asyncio.run(main())


def _json(response):
    try:
        return response.json()
    except ValueError:
        return None
