"""Parameter counts of every Table 3 preset: exact formula, and the paper's numbers.

The count follows from the architecture (Section 3), per layer, with
d = d_model, h heads, d_k = key_dim (d / h by default), d_v = value_dim
(d_k by default), d_ff, N layers, V the shared vocabulary:

    attention  = d·h·d_k (W^Q) + d·h·d_k (W^K) + d·h·d_v (W^V) + h·d_v·d (W^O)
                 + h·d_k + h·d_k + h·d_v + d                        (biases)
    ffn        = d·d_ff + d_ff + d_ff·d + d                         (W1, b1, W2, b2)
    layer_norm = 2·d                                                (gamma, beta)
    encoder    = attention + ffn + 2·layer_norm
    decoder    = 2·attention + ffn + 3·layer_norm     (self + cross attention)
    total      = V·d + N·(encoder + decoder)

V·d is counted once: the source embedding, the target embedding and the
pre-softmax projection share one matrix (Section 3.4), and sinusoidal
positions have no parameters.  The post-LN presets have no final norm.

`count_params()` must equal this exactly.  The paper rounds to millions with
its own ~37k BPE vocabulary and bookkeeping (e.g. base: V·d + N·(...) =
63.1M here vs "65"), so the paper check is looser: every total within 7% and,
for rows with d_model = 512 (same embedding size as base), each row's
*difference* from base within 1M of the paper's difference — the differences
cancel the embedding bookkeeping and test the per-layer maths.  Rows (A) vary
h with h·d_k = h·d_v = d_model fixed, so their count equals base exactly
(the paper prints none).
"""

import types

import pytest
from keras import ops

from keras_transformer.models import PAPER_PARAMETER_COUNTS, PRESETS, Transformer

ROWS_A = ["table3_a1", "table3_a2", "table3_a3", "table3_a4"]
PAPER_ROWS = sorted(PAPER_PARAMETER_COUNTS)
MILLION = 1_000_000


def expected_counts(config):
    """The per-component parameter counts of the module docstring, in Python."""
    d, h, d_ff = config.hidden_dim, config.num_heads, config.intermediate_dim
    d_k = config.key_dim or d // h
    d_v = config.value_dim or d_k
    attention = d * h * (2 * d_k + d_v) + h * d_v * d + h * (2 * d_k + d_v) + d
    ffn = d * d_ff + d_ff + d_ff * d + d
    layer_norm = 2 * d
    encoder = attention + ffn + 2 * layer_norm
    decoder = 2 * attention + ffn + 3 * layer_norm
    embedding = config.vocabulary_size * d
    total = embedding + config.num_layers * (encoder + decoder)
    return {
        "embedding": embedding,
        "encoder": encoder,
        "decoder": decoder,
        "total": total,
    }


def _zeros(shape, *args, dtype=None, **kwargs):
    return ops.zeros(shape, dtype=dtype or "float32")


_COUNTS = {}


def built_counts(name):
    """count_params() of the preset's model and of one of each block, built once.

    Weight *values* do not change counts, so the random initialisers are
    swapped for zeros while building: drawing 63M-214M random numbers is
    most of the build time of the full-size presets on 2 CPU cores.
    """
    if name not in _COUNTS:
        import keras.src.initializers.random_initializers as random_initializers

        fast = types.SimpleNamespace(
            normal=_zeros,
            uniform=_zeros,
            truncated_normal=_zeros,
            make_default_seed=random_initializers.random.make_default_seed,
        )
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(random_initializers, "random", fast)
            model = Transformer.from_preset(name)
        _COUNTS[name] = {
            "total": model.count_params(),
            "embedding": model.get_layer("shared_embedding").count_params(),
            "encoder": model.get_layer("encoder_block_0").count_params(),
            "decoder": model.get_layer("decoder_block_0").count_params(),
        }
        del model  # up to 0.9 GB of zeros (big); an explicit gc.collect() costs ~1 s
    return _COUNTS[name]


@pytest.mark.parametrize(
    "name", ["base", *ROWS_A, *[r for r in PAPER_ROWS if r != "base"]]
)
def test_count_params_equals_formula(name):
    """count_params() equals the per-layer formula exactly, component by component."""
    assert built_counts(name) == expected_counts(PRESETS[name])


@pytest.mark.parametrize("name", ROWS_A)
def test_rows_a_equal_base(name):
    """(A) rows keep h·d_k = h·d_v = d_model, hence exactly the base count."""
    config = PRESETS[name]
    assert config.num_heads * config.key_dim == config.hidden_dim
    assert built_counts(name)["total"] == built_counts("base")["total"]


@pytest.mark.parametrize("name", PAPER_ROWS)
def test_total_within_7_percent_of_paper(name):
    """Every total within 7% of Table 3 (the vocabulary bookkeeping differs)."""
    ours = built_counts(name)["total"] / MILLION
    assert ours == pytest.approx(PAPER_PARAMETER_COUNTS[name], rel=0.07)


@pytest.mark.parametrize(
    "name", [r for r in PAPER_ROWS if r != "base" and PRESETS[r].hidden_dim == 512]
)
def test_difference_from_base_matches_paper(name):
    """For d_model = 512 rows, (row - base) is the paper's (row - base) within 1M.

    E.g. (B) d_k = 16: the 18 attention layers (6 encoder, 12 decoder) lose
    2·d·h·(64 - 16) + 2·h·(64 - 16) parameters each: -7.09M vs the paper's -7M;
    (C) N = 2: 4 fewer encoder/decoder pairs: -29.4M vs -29M.
    """
    ours = (built_counts(name)["total"] - built_counts("base")["total"]) / MILLION
    paper = PAPER_PARAMETER_COUNTS[name] - PAPER_PARAMETER_COUNTS["base"]
    assert abs(ours - paper) <= 1.0, (name, ours, paper)
