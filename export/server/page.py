"""`GET /`: a page to try the served models by hand.

`page.html` beside this module is self-contained (its script and style
inline, nothing fetched but the server's own `:predict`), so it works on a
machine with no network.  The server writes into it the models it serves,
their versions and each signature's inputs; the page turns what a person
types (one sentence a line, one series a line, token ids, or a raw JSON
body) into TensorFlow Serving's row format, sends it, and shows the answer
and the milliseconds it took.  `tests/test_server_page.py` drives it in
headless Chromium.
"""

import functools
import json
import os

_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "page.html")
_SLOT = "/*MODELS*/null"


@functools.cache
def _template():
    with open(_TEMPLATE, encoding="utf-8") as f:
        text = f.read()
    if _SLOT not in text:
        raise ValueError(f"{_TEMPLATE} has no {_SLOT!r} for the models.")
    return text


def models_summary(manager):
    """[{name, version, signatures: {name: {input: {dtype, shape}}}}] of the
    versions in service (the highest of each model)."""
    models = []
    for name in sorted(manager.sources):
        versions = manager.served[name]
        if not versions:
            models.append({"name": name, "version": None, "signatures": {}})
            continue
        version = max(versions)
        signatures = {
            signature_name: {spec.name: {"dtype": spec.dtype, "shape": list(spec.shape)}
                             for spec in signature.inputs.values()}
            for signature_name, signature in versions[version].servable.signatures.items()}
        models.append({"name": name, "version": version, "signatures": signatures})
    return models


def page_html(manager):
    """The page, with `manager`'s models written into its script."""
    models = json.dumps(models_summary(manager)).replace("</", "<\\/")
    return _template().replace(_SLOT, models)
