"""New versions are swapped in under load; damaged ones are refused; SIGTERM drains.

The classifier export (quick to load) is served from a base path polled
every 0.2 s.  A second version copied in while clients keep sending is
loaded, warmed and put in service with no request failing; a third whose
variables are damaged is refused with one log line while the second keeps
answering, and is loaded once its files are put right.  The command line
(`python -m export serve`) stopped with SIGTERM while requests are in
flight answers each of them and exits with 0.
"""

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.conftest import REPO_ROOT
from tests.export_fixtures import SENTENCES, exported_classifier
from tests.server_fixtures import (
    add_version,
    assert_same_answer,
    client,
    expected,
    running_server,
    texts,
)

PREDICT = "/v1/models/classifier:predict"
BODY = {"instances": SENTENCES[:2]}


def _wait_for(condition, timeout=120, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def _states(http):
    answer = http.get("/v1/models/classifier").json()
    return {int(s["version"]): (s["state"], s["status"]["error_code"])
            for s in answer["model_version_status"]}


class Load:
    """Clients that keep sending `BODY` until stopped; every answer kept."""

    def __init__(self, url, clients=4):
        self.url = url
        self.answers = []
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._send, daemon=True)
                        for _ in range(clients)]

    def _send(self):
        with httpx.Client(base_url=self.url, timeout=60) as http:
            while not self.stopped.is_set():
                started = time.monotonic()
                try:
                    response = http.post(PREDICT, json=BODY)
                    status, answer = response.status_code, response.text
                    answer = json.loads(answer) if status == 200 else answer
                except httpx.HTTPError as error:
                    status, answer = None, type(error).__name__
                self.answers.append((started, time.monotonic(), status, answer))

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stopped.set()
        for thread in self.threads:
            thread.join(120)


def _corrupt_variables(version_dir):
    data = [name for name in os.listdir(os.path.join(version_dir, "variables"))
            if name.startswith("variables.data")][0]
    path = os.path.join(version_dir, "variables", data)
    with open(path, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    return path


def test_versions_swap_under_load_and_a_damaged_one_is_refused(tmp_path, caplog):
    base = str(tmp_path / "classifier")
    add_version(exported_classifier(), base, 1)
    reference = expected("classifier", "serving_default", {"sentences": texts(SENTENCES[:2])})
    with caplog.at_level(logging.INFO, logger="export.server"), \
            running_server({"classifier": base}, poll_seconds=0.2) as server, \
            client(server) as http:
        with Load(server.url) as load:
            _wait_for(lambda: len(load.answers) >= 20, what="20 answers")
            add_version(exported_classifier(), base, 2)
            _wait_for(lambda: _states(http) == {2: ("AVAILABLE", "OK"), 1: ("END", "OK")},
                      what="the swap to version 2")
            swapped = len(load.answers)
            _wait_for(lambda: len(load.answers) >= swapped + 20, what="20 answers after")
        assert len(load.answers) >= 40
        for _, _, status, answer in load.answers:
            assert status == 200, answer
            assert_same_answer(answer, reference)
        assert http.post("/v1/models/classifier/versions/1:predict", json=BODY).status_code == 404
        assert http.post("/v1/models/classifier/versions/2:predict", json=BODY).status_code == 200

        damaged_dir = add_version(exported_classifier(), base, 3)
        damaged = _corrupt_variables(damaged_dir)
        _wait_for(lambda: _states(http).get(3) == ("END", "DATA_LOSS"), what="refusing 3")
        time.sleep(1.0)  # five more scans of the base path
        refusals = [r.getMessage() for r in caplog.records
                    if "version 3" in r.getMessage()]
        assert len(refusals) == 1, refusals
        assert "refused" in refusals[0] and "variables" in refusals[0] \
            and "still serving version 2" in refusals[0]
        status = http.get("/v1/models/classifier/versions/3").json()["model_version_status"][0]
        assert "variables" in status["status"]["error_message"]
        assert_same_answer(http.post(PREDICT, json=BODY).json(), reference)
        assert _states(http)[2] == ("AVAILABLE", "OK")

        shutil.copy(os.path.join(exported_classifier(), "variables",
                                 os.path.basename(damaged)), damaged)
        _wait_for(lambda: _states(http).get(3) == ("AVAILABLE", "OK"), what="loading 3")
        assert _states(http)[2] == ("END", "OK")
        assert_same_answer(http.post(PREDICT, json=BODY).json(), reference)


def test_a_version_without_its_manifest_is_refused(tmp_path, caplog):
    base = str(tmp_path / "classifier")
    add_version(exported_classifier(), base, 1)
    broken = add_version(exported_classifier(), base, 2)
    os.remove(os.path.join(broken, "assets", "labels.txt"))
    with caplog.at_level(logging.INFO, logger="export.server"), \
            running_server({"classifier": base}) as server, client(server) as http:
        states = _states(http)
        assert states[1] == ("AVAILABLE", "OK") and states[2] == ("END", "DATA_LOSS")
        assert "labels.txt is missing" in http.get(
            "/v1/models/classifier/versions/2").json()["model_version_status"][0][
                "status"]["error_message"]
        assert http.post(PREDICT, json=BODY).status_code == 200


@pytest.mark.slow
def test_sigterm_during_load_answers_what_is_in_flight_and_exits_0(tmp_path):
    base = str(tmp_path / "classifier")
    add_version(exported_classifier(), base, 1)
    batching = tmp_path / "batching.config"
    # Requests wait up to 300 ms for a batch to fill: some are always in flight.
    batching.write_text("max_batch_size { value: 64 }\nbatch_timeout_micros { value: 300000 }\n"
                        "num_batch_threads { value: 1 }\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "export", "serve", "--model_name=classifier",
         f"--model_base_path={base}", "--rest_api_port=0", "--enable_batching",
         f"--batching_parameters_file={batching}"],
        cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        url, lines = None, []
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r"serving classifier on (http://127\.0\.0\.1:\d+)", line)
            url = found and found.group(1)
        assert url, "".join(lines)
        with Load(url, clients=6) as load:
            _wait_for(lambda: len(load.answers) >= 12, what="12 answers")
            time.sleep(0.15)  # half a batch's wait: the next batch's requests are in
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0, process.stderr.read()
        # Sent at least 50 ms before the signal: received, so in flight or answered.
        received = [(ended, status, answer) for started, ended, status, answer
                    in load.answers if started < signalled - 0.05]
        assert received and all(status == 200 for _, status, _ in received), received
        assert any(ended > signalled for ended, _, _ in received), "none was in flight"
        reference = expected("classifier", "serving_default",
                             {"sentences": texts(SENTENCES[:2])})
        for _, _, answer in received:
            assert_same_answer(answer, reference)
        later = [status for started, _, status, _ in load.answers if started >= signalled]
        assert all(status in (200, None) for status in later), later
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        process.stderr.close()


@pytest.mark.slow
def test_the_port_opens_once_every_signature_has_run(tmp_path, caplog):
    from export.server.batch_keys import batch_sizes
    from export.server.servable import Servable
    from tests.export_fixtures import exported_translator

    base = str(tmp_path / "classifier")
    add_version(exported_classifier(), base, 1)
    with caplog.at_level(logging.INFO, logger="export.server"), \
            running_server({"classifier": base}) as server, client(server) as http:
        assert _states(http) == {1: ("AVAILABLE", "OK")}  # at once: never LOADING
        lines = [r.getMessage() for r in caplog.records if r.name == "export.server"]
    assert lines[0].startswith("model 'classifier' version 1 available: 2 signatures, "
                               "loaded and warmed up in ")
    assert lines[1] == f"serving classifier on {server.url}"
    translator = Servable.load("translator", 1, exported_translator())
    widths = translator.keys.warmup_widths()
    assert widths == [8, 16, 24]  # its max_sequence_length, read from translate_ids
    # Each of the 5 signatures once; with buckets, each _xla one at every bucket too.
    assert translator.warm_up(2, all_buckets=True) == 5 + 2 * len(widths) * len(
        batch_sizes(2))
