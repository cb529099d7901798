"""Bad requests are answered, never fatal: 400, 404, 405 or 413 with `{"error": ...}`.

A table of malformed bodies, wrong types and keys, unknown models,
versions, signatures and paths, each answered with TensorFlow Serving's
error body naming what was wrong; then a seeded fuzz run of broken bodies
sent beside good requests, which must all be answered right.
"""

import json

import numpy as np
import pytest

from tests.export_fixtures import SENTENCES
from tests.server_fixtures import (
    BATCHING,
    MAX_BODY_BYTES,
    assert_same_answer,
    client,
    expected,
    request_many,
    shared_server,
    texts,
)

PREDICT = "/v1/models/translator:predict"
IDS = {"signature_name": "translate_ids"}
CLASSIFY_IDS = {"signature_name": "classify_ids"}

#: (method, path, body: bytes or a JSON value, status, what the error names)
BAD_REQUESTS = [
    ("POST", PREDICT, b"", 400, "empty"),
    ("POST", PREDICT, b"  \n\t", 400, "empty"),
    ("POST", PREDICT, b"{bad json", 400, "not valid JSON"),
    ("POST", PREDICT, b'{"instances": ["a"]', 400, "not valid JSON"),
    ("POST", PREDICT, b"\xff\xfe{}", 400, "not UTF-8"),
    ("POST", PREDICT, b"[" * 100_000, 400, "nests JSON too deeply"),
    ("POST", PREDICT, '"a sentence"', 400, "must be a JSON object"),
    ("POST", PREDICT, [1, 2], 400, "must be a JSON object"),
    ("POST", PREDICT, {}, 400, "found neither"),
    ("POST", PREDICT, {"instances": ["a"], "inputs": ["a"]}, 400, "found both"),
    ("POST", PREDICT, {"instance": ["a"]}, 400, "Unknown key 'instance'"),
    ("POST", PREDICT, {"instances": "a sentence"}, 400, "non-empty list"),
    ("POST", PREDICT, {"instances": []}, 400, "non-empty list"),
    ("POST", PREDICT, {"instances": [1]}, 400, "must be a string"),
    ("POST", PREDICT, {"instances": [None]}, 400, "found null"),
    ("POST", PREDICT, {"instances": [True]}, 400, "found true or false"),
    ("POST", PREDICT, {"instances": [["a", "b"]]}, 400, "found a list"),
    ("POST", PREDICT, b'{"instances": [NaN]}', 400, "found float nan"),
    ("POST", PREDICT, {"instances": [{"sentence": "a"}]}, 400, "unknown input 'sentence'"),
    ("POST", PREDICT, {"instances": [{"sentences": "a"}, "b"]}, 400, "both kinds"),
    ("POST", PREDICT, {"inputs": {"sentences": ["a"], "extra": ["b"]}}, 400,
     "unknown input 'extra'"),
    ("POST", PREDICT, b'{"instances": ["\\ud800 lone surrogate"]}', 400, "not valid UTF-8"),
    ("POST", PREDICT, {"instances": [{"b64": "not base64!"}]}, 400, "not valid base64"),
    ("POST", PREDICT, {"signature_name": 5, "instances": ["a"]}, 400, "must be a string"),
    ("POST", PREDICT, {"signature_name": "translate", "instances": ["a"]}, 404,
     "'translate' not found"),
    ("POST", PREDICT, {"instances": ["a"] * (BATCHING.max_batch_size + 1)}, 400,
     f"at most {BATCHING.max_batch_size}"),
    ("POST", PREDICT, {**IDS, "instances": [[1, 2], [3]]}, 400, "ragged"),
    ("POST", PREDICT, {**IDS, "instances": [[1.5, 2]]}, 400, "must be an integer"),
    ("POST", PREDICT, {**IDS, "instances": [[True, 1]]}, 400, "found true or false"),
    ("POST", PREDICT, {**IDS, "instances": [["5", "6"]]}, 400, "found str '5'"),
    ("POST", PREDICT, {**IDS, "instances": [[2 ** 40]]}, 400, "int32's range"),
    ("POST", PREDICT, {**IDS, "inputs": [[[1, 2]]]}, 400, "found 3-dimensional"),
    ("POST", PREDICT, {**IDS, "inputs": 5}, 400, "takes a list of rows"),
    ("POST", PREDICT, {**IDS, "inputs": [7, 8]}, 400, "ragged or shallower"),
    ("POST", "/v1/models/classifier:predict", {**CLASSIFY_IDS, "instances": [{"ids": [1]}]},
     400, "unknown input 'ids'"),
    ("POST", "/v1/models/images:predict", {"instances": [[[[0.0] * 3] * 8] * 7]}, 400,
     "needs size 8 on axis 1; found 7"),
    ("POST", "/v1/models/images:predict", {"instances": [[[[0.0] * 2] * 8] * 8]}, 400,
     "needs size 3 on axis 3"),
    ("POST", "/v1/models/series:predict", {"instances": [[[0.1, "0.2"]]]}, 400,
     "must be a number; found str"),
    ("POST", "/v1/models/series:predict", {"instances": [[0.1, 0.2]]}, 400,
     "takes 3-dimensional values"),
    # Steps first, to an export of series channels first (one feature).
    ("POST", "/v1/models/series:predict", {"instances": [[[0.1], [0.2], [0.3]]]}, 400,
     "needs size 1 on axis 1; found 3"),
    ("POST", "/v1/models/nope:predict", {"instances": ["a"]}, 404, "model 'nope'"),
    ("POST", "/v1/models/translator/versions/7:predict", {"instances": ["a"]}, 404,
     "version 7"),
    ("POST", "/v1/models/translator/versions/x:predict", {"instances": ["a"]}, 400,
     "not a version number"),
    ("POST", "/v1/models/translator/labels/stable:predict", {"instances": ["a"]}, 404,
     "labels"),
    ("POST", "/v1/models/translator:classify", {"instances": ["a"]}, 404, ":classify"),
    ("GET", PREDICT, None, 405, "answers POST"),
    ("POST", "/v1/models/translator", {"instances": ["a"]}, 405, "answers GET"),
    ("POST", "/v1/models/translator/metadata", {}, 405, "answers GET"),
    ("GET", "/v1/models/translator/versions", None, 404, "Malformed request"),
    ("GET", "/v1/models/nope", None, 404, "model 'nope'"),
    ("GET", "/v1/models/nope/metadata", None, 404, "model 'nope'"),
    ("GET", "/v1/models/translator/versions/3/metadata", None, 404, "version 3"),
    ("POST", PREDICT, b"[" + b" " * MAX_BODY_BYTES + b"]", 413, "bytes"),
]


@pytest.fixture(scope="module")
def http():
    with client(shared_server()) as session:
        yield session


def _send(http, method, path, body):
    content = body if isinstance(body, bytes) else (None if body is None else
                                                      json.dumps(body).encode())
    return http.request(method, path, content=content)


@pytest.mark.parametrize("method, path, body, status, named", BAD_REQUESTS,
                         ids=[f"{i}-{row[3]}" for i, row in enumerate(BAD_REQUESTS)])
def test_a_bad_request_is_answered_with_what_was_wrong(http, method, path, body, status,
                                                       named):
    answer = _send(http, method, path, body)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()
    assert set(error) == {"error"} and named in error["error"], error


def test_the_table_is_large_enough_and_the_server_still_answers(http):
    assert len(BAD_REQUESTS) >= 30
    good = http.post(PREDICT, json={"instances": SENTENCES[:2]})
    assert_same_answer(good.json(), expected("translator", "serving_default",
                                             {"sentences": texts(SENTENCES[:2])}))


def _fuzzed_bodies(count, seed=0):
    """Seeded broken bodies: good ones cut, flipped, spliced, and random JSON."""
    rng = np.random.default_rng(seed)
    good = [json.dumps({"instances": SENTENCES[:2]}).encode(),
            json.dumps({"signature_name": "translate_ids", "inputs": [[5, 6, 7]]}).encode(),
            json.dumps({"signature_name": "translate_xla", "instances": [{"sentences": "a"}]})
            .encode()]
    atoms = [None, True, 0, -1, 2 ** 31, 1.5, "", "a", "\u00e9\u4e2d", [], {}, [[]], {"b64": 1}]

    def value(depth=0):
        kind = rng.integers(0, 3 if depth < 3 else 1)
        if kind == 0:
            return atoms[rng.integers(len(atoms))]
        if kind == 1:
            return [value(depth + 1) for _ in range(rng.integers(0, 4))]
        keys = ["instances", "inputs", "signature_name", "sentences", "encoder_token_ids"]
        return {str(rng.choice(keys)): value(depth + 1) for _ in range(rng.integers(0, 3))}

    bodies = []
    for i in range(count):
        body = bytearray(good[i % len(good)])
        kind = i % 4
        if kind == 0:
            body = body[: rng.integers(0, len(body))]
        elif kind == 1:
            for _ in range(rng.integers(1, 4)):
                body[rng.integers(len(body))] = int(rng.integers(0, 256))
        elif kind == 2:
            at = rng.integers(len(body))
            body = body[:at] + bytes(rng.integers(0, 256, rng.integers(1, 8), dtype=np.uint8)) \
                + body[at:]
        else:
            body = bytearray(json.dumps(value(), allow_nan=True).encode())
        bodies.append(bytes(body))
    return bodies


def test_fuzzed_bodies_never_stop_the_good_requests_beside_them():
    server = shared_server()
    bodies = _fuzzed_bodies(240)
    good = {"instances": SENTENCES[3:5]}
    requests = []
    for i, body in enumerate(bodies):
        requests.append(("POST", PREDICT, body))
        if i % 4 == 0:
            requests.append(("POST", PREDICT, good))
    answers = request_many(server.url, requests, clients=8)
    reference = expected("translator", "serving_default", {"sentences": texts(SENTENCES[3:5])})
    statuses = {}
    for (_, _, body), (status, answer, _) in zip(requests, answers, strict=True):
        statuses[status] = statuses.get(status, 0) + 1
        assert status in (200, 400, 404, 413), (body[:200], status, answer)
        if body is good:
            assert status == 200
            assert_same_answer(answer, reference)
        elif status != 200:
            assert set(answer) == {"error"} and answer["error"], (body[:200], answer)
    assert statuses.get(400, 0) > len(bodies) // 2, statuses
