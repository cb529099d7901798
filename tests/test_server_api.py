"""`python -m export serve` speaks TensorFlow Serving's REST API.

Status, metadata and predict (row and columnar, every signature of the
translator and the classifier) are checked against TensorFlow Serving's
JSON shapes and against the signatures called in this process; the
guide's client runs as it is written; the metrics and the readiness answer.
"""

import base64
import contextlib
import io
import json
import logging
import re

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.export_fixtures import SENTENCES, exported_classifier
from tests.server_fixtures import (
    add_version,
    assert_same_answer,
    client,
    expected,
    running_server,
    shared_server,
    texts,
)


@pytest.fixture(scope="module")
def http():
    with client(shared_server()) as session:
        yield session


def test_status_is_tensorflow_servings(http):
    answer = http.get("/v1/models/translator")
    assert answer.status_code == 200
    assert answer.json() == {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK",
                                                          "error_message": ""}}]}
    assert http.get("/v1/models/translator/versions/1").json() == answer.json()
    missing = http.get("/v1/models/translator/versions/2")
    assert missing.status_code == 404 and "version 2" in missing.json()["error"]


def test_metadata_lists_the_signature_defs(http):
    answer = http.get("/v1/models/translator/metadata").json()
    assert answer["model_spec"] == {"name": "translator", "signature_name": "",
                                    "version": "1"}
    signatures = answer["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "translate_ids", "translate_beam", "translate_xla",
            "translate_beam_xla"} <= set(signatures)
    sentences = signatures["serving_default"]["inputs"]["sentences"]
    assert sentences["dtype"] == "DT_STRING"
    assert sentences["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}],
                                         "unknown_rank": False}
    assert signatures["serving_default"]["method_name"] == "tensorflow/serving/predict"
    assert set(signatures["translate_beam"]["outputs"]) == {"translations", "scores"}
    assert http.get("/v1/models/classifier/versions/1/metadata").json()[
        "model_spec"]["version"] == "1"


SENTENCE_SIGNATURES = ["serving_default", "translate_xla", "translate_beam",
                       "translate_beam_xla"]


@pytest.mark.parametrize("signature", SENTENCE_SIGNATURES)
def test_predict_answers_as_the_signature_in_process(http, signature):
    sentences = SENTENCES[:3]
    reference = expected("translator", signature, {"sentences": texts(sentences)})
    rows = http.post("/v1/models/translator:predict",
                     json={"signature_name": signature, "instances": sentences})
    assert rows.status_code == 200, rows.text
    assert_same_answer(rows.json(), reference)
    named = http.post("/v1/models/translator/versions/1:predict", json={
        "signature_name": signature, "instances": [{"sentences": s} for s in sentences]})
    assert_same_answer(named.json(), reference)
    columns = http.post("/v1/models/translator:predict",
                        json={"signature_name": signature, "inputs": sentences})
    assert_same_answer(columns.json(), expected("translator", signature,
                                                {"sentences": texts(sentences)}, True))


def test_predict_with_ids_and_the_classifier(http):
    ids = [[5, 9, 12, 3], [7, 8, 0, 0]]
    answer = http.post("/v1/models/translator:predict",
                       json={"signature_name": "translate_ids", "inputs": {"encoder_token_ids": ids}})
    assert_same_answer(answer.json(), expected(
        "translator", "translate_ids", {"encoder_token_ids": np.array(ids, np.int32)}, True))
    classified = http.post("/v1/models/classifier:predict", json={"instances": SENTENCES[:4]})
    reference = expected("classifier", "serving_default", {"sentences": texts(SENTENCES[:4])})
    assert_same_answer(classified.json(), reference)
    assert set(classified.json()["predictions"][0]) == {"labels", "probabilities"}
    by_ids = http.post("/v1/models/classifier:predict",
                       json={"signature_name": "classify_ids", "instances": ids})
    assert_same_answer(by_ids.json(), expected(
        "classifier", "classify_ids", {"token_ids": np.array(ids, np.int32)}))


def test_series_with_missing_values_and_images(http):
    series = [[[0.1, 0.5, float("nan"), 0.3, 0.2, 0.9]],  # (B, F, T), channels first
              [[1.0, 0.0, 0.4, 0.4, 0.8, 0.1]]]
    # NaN (a missing value) travels as TensorFlow Serving writes it: a bare NaN.
    body = json.dumps({"instances": series}, allow_nan=True).encode()
    assert b"NaN" in body
    answer = http.post("/v1/models/series:predict", content=body)
    assert answer.status_code == 200, answer.text
    assert_same_answer(answer.json(), expected(
        "series", "serving_default", {"features": np.array(series, np.float32)}))
    images = np.random.default_rng(0).random((2, 8, 8, 3)).round(3).tolist()
    answer = http.post("/v1/models/images:predict", json={"inputs": images})
    assert_same_answer(answer.json(), expected(
        "images", "serving_default", {"images": np.array(images, np.float32)}, True))


def test_b64_strings_are_read_as_tensorflow_serving_reads_them(http):
    sentence = SENTENCES[0]
    encoded = base64.b64encode(sentence.encode()).decode()
    answer = http.post("/v1/models/translator:predict",
                       json={"instances": [{"b64": encoded}]})
    assert_same_answer(answer.json(), expected("translator", "serving_default",
                                               {"sentences": texts([sentence])}))


def _guide_client():
    guide = (REPO_ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(# A client of TensorFlow Serving's REST API.*?)```",
                        guide, flags=re.S)
    assert len(blocks) == 1, "docs/guide.md holds one client block"
    return blocks[0]


def test_the_guides_client_runs_as_written(http):
    """The client in docs/guide.md (requests only, TensorFlow Serving's JSON),
    with its address pointed at this test's server."""
    server = shared_server()
    code = _guide_client()
    assert "http://127.0.0.1:8501" in code and "import requests" in code
    code = code.replace("http://127.0.0.1:8501", server.url)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/guide.md", "exec"), {})
    translation = expected("translator", "translate_xla",
                           {"sentences": texts(["there are eight cats in the garden"])})
    assert translation["predictions"][0] in printed.getvalue()
    assert "AVAILABLE" in printed.getvalue()


def test_metrics_count_requests_and_batches(http):
    http.post("/v1/models/classifier:predict", json={"instances": SENTENCES[:2]})
    http.post("/v1/models/classifier:predict", json={"instances": 5})
    text = http.get("/monitoring/prometheus/metrics").text
    assert re.search(r'^:tensorflow:serving:request_count_total\{API="predict",'
                     r'model_name="classifier",status="OK"\} [1-9]', text, flags=re.M)
    assert 'status="INVALID_ARGUMENT"' in text
    assert ":tensorflow:serving:batching_session:processed_batch_size_count" in text
    assert re.search(r'^:tensorflow:serving:batching_session:queued_rows\{'
                     r'model_name="translator",signature_name="serving_default",'
                     r'version="1"\} 0\.0$', text, flags=re.M)


def test_ready_and_the_page(http):
    assert http.get("/readyz").json() == {"ready": True}
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '"name": "translator"' in page.text and "translate_xla" in page.text
    assert not re.search(r"(src|href)=\"?https?:", page.text), "the page loads nothing"


def test_quiet_by_default_and_one_line_a_request_when_asked(http, caplog, tmp_path):
    with caplog.at_level(logging.INFO, logger="export.server"):
        for _ in range(3):
            assert http.post("/v1/models/classifier:predict",
                             json={"instances": ["a"]}).status_code == 200
        assert [r for r in caplog.records if r.name == "export.server"] == []
        base = str(tmp_path / "classifier")
        add_version(exported_classifier(), base, 1)
        with running_server({"classifier": base}, log_requests=True) as server:
            caplog.clear()
            with client(server) as own:
                for body in ({"instances": ["a"]}, {"instances": 1}):
                    own.post("/v1/models/classifier:predict", json=body)
            lines = [r.getMessage() for r in caplog.records if r.name == "export.server"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("POST /v1/models/classifier:predict 200 ")
    assert lines[1].startswith("POST /v1/models/classifier:predict 400 ")
