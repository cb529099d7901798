"""The page at `/`, used as a person uses it, in a real headless Chromium.

The browser (Debian's `chromium`; `.ci/run` installs it) opens the shared
server's page, a sentence is typed into the box and Send clicked with the
mouse; the page must show the translation the signature gives in process
and the milliseconds it took.  Then the classifier is picked and two
sentences classified, and a series pasted, a value missing in it.  Skipped, saying why, where `/usr/bin/chromium` is
not installed.
"""

import json
import os

import numpy as np
import pytest

from tests.chromium import CHROMIUM, HeadlessChromium
from tests.server_fixtures import expected, shared_server, texts

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"{CHROMIUM} is not installed (apt-get install -y chromium; .ci/run does)")


def _send(browser, text):
    browser.evaluate("document.getElementById('status').textContent = ''")
    browser.evaluate("document.getElementById('input').value = ''")
    browser.evaluate("document.getElementById('input').focus()")
    browser.type_text(text)
    browser.click("#send")
    status = browser.wait_for(
        "(() => { const s = document.getElementById('status').textContent;"
        " return s.includes(' ms') ? s : ''; })()")
    return status, browser.evaluate("document.getElementById('output').textContent")


def _pick(browser, model):
    """Chooses `model` in the page's list, as a person's click on it does."""
    browser.evaluate(f"(() => {{ const m = document.getElementById('model');"
                     f" m.value = {json.dumps(model)}; m.dispatchEvent(new Event('change'));"
                     f" }})()")
    assert browser.evaluate("document.getElementById('model').value") == model


def test_the_page_translates_a_typed_sentence_and_shows_the_time(tmp_path):
    server = shared_server()
    sentence = "the big cat sleeps today"
    reference = expected("translator", "serving_default", {"sentences": texts([sentence])})
    with HeadlessChromium(tmp_path / "profile") as browser:
        browser.open(server.url + "/")
        browser.wait_for("document.body && document.body.dataset.ready === 'true'")
        assert browser.evaluate("document.getElementById('model').value") == "classifier"
        _pick(browser, "translator")
        assert browser.evaluate("document.getElementById('signature').value") == \
            "serving_default"
        status, output = _send(browser, sentence)
        assert status.startswith("200 in ") and status.endswith(" ms (version 1)"), status
        assert float(status.split()[2]) > 0
        assert json.loads(output) == reference["predictions"]

        _pick(browser, "classifier")
        status, output = _send(browser, "the dog runs\nrain falls today")
        classified = expected("classifier", "serving_default",
                              {"sentences": texts(["the dog runs", "rain falls today"])})
        assert status.startswith("200 in "), status
        assert [p["labels"] for p in json.loads(output)] == [
            p["labels"] for p in classified["predictions"]]

        status, output = _send(browser, "")
        assert status.startswith("400 in ") and "non-empty list" in output, (status, output)

        _pick(browser, "series")  # a pasted series, a missing value in it
        status, output = _send(browser, "0.1 0.5 nan 0.3 0.2 0.9\n1, 0, 0.4, 0.4, 0.8, 0.1")
        series = np.array([[0.1, 0.5, np.nan, 0.3, 0.2, 0.9], [1, 0, 0.4, 0.4, 0.8, 0.1]],
                          np.float32)[:, None]  # (B, F, T): the export takes channels first
        reference = expected("series", "serving_default", {"features": series})
        assert status.startswith("200 in "), (status, output)
        assert [p["labels"] for p in json.loads(output)] == [
            p["labels"] for p in reference["predictions"]]
