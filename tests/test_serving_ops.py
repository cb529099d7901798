"""The exported SavedModels load in the stock TensorFlow Serving image.

That image links TF core and TF Text 2.12.1; a graph with any other op type
fails there with "Op type not registered". Every op type of each exported
graph (its functions included) must be a TF core op or one that the TF
Text 2.12.1 wheel's op libraries define (`export/serving_ops/`, written by
`python3 -m export.serving_ops extract` from that wheel).
"""

import json
import os

import pytest

from export import serving_ops
from export.saved_model import export_model
from keras_transformer.layers import PatchStem
from keras_transformer.models import TransformerClassifier, VisionTransformer
from tests.export_fixtures import exported_classifier, exported_translator


@pytest.fixture(scope="module")
def text_ops_2_12():
    return serving_ops.load_text_ops("2.12.1")


@pytest.fixture(scope="module")
def core_ops():
    return serving_ops.core_op_names()


def _series_export(directory):
    model = TransformerClassifier(
        PatchStem(2, hidden_dim=8, max_sequence_length=12),
        num_classes=3, num_layers=1, num_heads=2, intermediate_dim=16,
    )  # fmt: skip
    return export_model(model, directory, label_names=["a", "b", "c"])


def _image_export(directory):
    model = VisionTransformer(
        num_classes=2, image_size=8, patch_size=4, num_layers=1, hidden_dim=8,
        num_heads=2, intermediate_dim=16,
    )  # fmt: skip
    return export_model(model, directory, label_names=["x", "y"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["translator", "classifier", "series", "image"])
def test_exported_graph_uses_only_stock_server_ops(
    kind, tmp_path, text_ops_2_12, core_ops
):
    path = {
        "translator": exported_translator,
        "classifier": exported_classifier,
        "series": lambda: _series_export(tmp_path / "series"),
        "image": lambda: _image_export(tmp_path / "image"),
    }[kind]()
    ops = serving_ops.op_types(path)
    core, text, missing = serving_ops.check_serving_ops(ops, text_ops_2_12, core_ops)
    assert not missing, (
        f"{kind}: ops the stock TF Serving image lacks: {sorted(missing)}"
    )
    assert (
        "StatefulPartitionedCall" in core or "PartitionedCall" in core
    )  # read the functions
    if kind in ("translator", "classifier"):
        # The tokenizer is in the graph: its TF Text ops were found and checked.
        assert any("Wordpiece" in op for op in text), sorted(text)
    else:
        assert not text


def test_text_ops_come_from_the_wheel_record():
    with open(serving_ops.ops_file("2.12.1"), encoding="utf-8") as f:
        record = json.load(f)
    assert record["wheel"].startswith("tensorflow_text-2.12.1-")
    assert len(record["sha256"]) == 64
    libraries = record["libraries"]
    assert all(name.endswith(".so") for name in libraries)
    # The tokenizer ops our graphs use live in the libraries that define them.
    assert (
        "FastWordpieceTokenizeWithOffsets"
        in libraries["tensorflow_text/python/ops/_fast_wordpiece_tokenizer.so"]
    )


def test_an_op_newer_than_the_server_is_reported(text_ops_2_12, core_ops):
    newer = serving_ops.text_op_names() - text_ops_2_12
    # Ops TF Text added after 2.12.1 exist, and the check names them.
    assert newer, "expected TF Text 2.21 to register ops that 2.12.1 lacks"
    op = sorted(newer)[0]
    _, _, missing = serving_ops.check_serving_ops(
        {"Const", op}, text_ops_2_12, core_ops
    )
    assert missing == {op}


def test_library_scan_does_not_match_inside_a_longer_name():
    data = b"\x00NormalizeUTF8WithOffsets\x00CaseFoldUTF8\x00x34FastWordpieceDetokenizeOpE\x00"
    found = serving_ops._names_in_library(
        data,
        {
            "NormalizeUTF8",
            "NormalizeUTF8WithOffsets",
            "CaseFoldUTF8",
            "FastWordpieceDetokenize",
            "Missing",
        },
    )
    assert found == {
        "NormalizeUTF8WithOffsets",
        "CaseFoldUTF8",
        "FastWordpieceDetokenize",
    }


@pytest.mark.skipif(
    not os.environ.get("TF_TEXT_2_12_WHEEL"),
    reason="set TF_TEXT_2_12_WHEEL to a tensorflow_text-2.12.1 wheel to "
    "re-extract its op list and compare it with the committed one",
)
def test_committed_op_list_matches_the_wheel():
    wheel = os.environ["TF_TEXT_2_12_WHEEL"]
    record = serving_ops.extract(wheel, serving_ops.text_op_names())
    with open(serving_ops.ops_file("2.12.1"), encoding="utf-8") as f:
        assert record == json.load(f)
