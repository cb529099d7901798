"""The page at `/`, used as a person uses it, in a real headless Chromium.

The browser (Debian's `chromium`; `.ci/run` installs it) opens the shared
server's page, a sentence is typed into the box and Send clicked with the
mouse; the page must show the translation the signature gives in process
and the milliseconds it took.  Then the classifier is picked and a
sentence classified.  Skipped, saying why, where `/usr/bin/chromium` is
not installed.
"""

import json
import os

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


def test_the_page_translates_a_typed_sentence_and_shows_the_time(tmp_path):
    server = shared_server()
    sentence = "the big cat sleeps today"
    reference = expected("translator", "serving_default", {"sentences": texts([sentence])})
    with HeadlessChromium(tmp_path / "profile") as browser:
        browser.open(server.url + "/")
        browser.wait_for("document.body && document.body.dataset.ready === 'true'")
        assert browser.evaluate("document.getElementById('model').value") == "classifier"
        browser.evaluate("(() => { const m = document.getElementById('model');"
                         " m.value = 'translator'; m.dispatchEvent(new Event('change')); })()")
        assert browser.evaluate("document.getElementById('signature').value") == \
            "serving_default"
        status, output = _send(browser, sentence)
        assert status.startswith("200 in ") and status.endswith(" ms (version 1)"), status
        assert float(status.split()[2]) > 0
        assert json.loads(output) == reference["predictions"]

        browser.evaluate("(() => { const m = document.getElementById('model');"
                         " m.value = 'classifier'; m.dispatchEvent(new Event('change')); })()")
        status, output = _send(browser, "the dog runs\nrain falls today")
        classified = expected("classifier", "serving_default",
                              {"sentences": texts(["the dog runs", "rain falls today"])})
        assert status.startswith("200 in "), status
        assert [p["labels"] for p in json.loads(output)] == [
            p["labels"] for p in classified["predictions"]]

        status, output = _send(browser, "")
        assert status.startswith("400 in ") and "non-empty list" in output, (status, output)
