"""The modeling library on the JAX backend (a subprocess: this one runs TF).

`keras_transformer/` is written in `keras.ops` only; tests/jax_backend_check.py
checks on JAX what would break if it were not (fused vs einsum attention,
training, cached decoding vs recompute).  JAX is part of the `dev` extra.
"""

import importlib.util
import json

import background
import pytest

from tests.conftest import REPO_ROOT

JAX_INSTALLED = importlib.util.find_spec("jax") is not None
if JAX_INSTALLED:  # else the test skips, and no background run is wasted
    background.define(
        "jax backend", 53, "background", "run_script",
        REPO_ROOT / "tests" / "jax_backend_check.py",
        {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO_ROOT)},
        REPO_ROOT, 600,
    )


@pytest.mark.slow
@pytest.mark.background("jax backend")
def test_library_runs_and_agrees_on_the_jax_backend():
    if not JAX_INSTALLED:
        pytest.skip("JAX is not installed; `pip install -e '.[dev]'` installs it")
    returncode, stdout, stderr = background.result("jax backend")
    assert returncode == 0, stdout[-3000:] + stderr[-3000:]
    figures = json.loads(stdout.strip().splitlines()[-1])
    assert figures["fused_vs_einsum_max_abs_diff"] < 1e-5
    first, last = figures["train_loss_first_last"]
    assert last < 0.5 * first
    assert figures["ngram_classifier_padding_diff"] < 1e-5
    assert figures["series_padding_diff"] < 1e-5
    first, last = figures["ngram_classifier_loss_first_last"]
    assert last < 0.5 * first
