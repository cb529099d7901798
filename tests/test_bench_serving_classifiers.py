"""benchmarks/bench_serving_classifiers.py's models and parity check (no timing)."""

import pathlib
import sys

import numpy as np
import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_serving_classifiers as bench  # noqa: E402

from keras_transformer.models import (  # noqa: E402
    ClassifierEnsemble,
    TextCNNClassifier,
    TransformerClassifier,
)

TINY_TEXT = ["vocabulary_size=120", "char_ngram_buckets=64", "max_sequence_length=16",
             "model.hidden_dim=8", "ensemble_size=2"]
TINY_SERIES = ["stem_kernel_features=84", "model.num_layers=1", "model.hidden_dim=8",
               "model.intermediate_dim=16", "model.num_heads=2", "ensemble_size=1"]


def test_the_presets_build_five_members_of_the_sizes_the_docstring_gives():
    """What the benchmark times is what the `sst2` and `timeseries`
    presets build on SST-2's and ArrowHead's shapes (built, not exported)."""
    task, config, model, _ = bench.text_classifier()
    assert isinstance(model, ClassifierEnsemble) and len(model.members) == 5
    assert all(isinstance(m, TextCNNClassifier) for m in model.members)
    assert task.tokenizer.vocabulary_size == model.vocabulary_size == config.vocabulary_size == 8000
    assert model.max_sequence_length == 64 and model.char_ngram_buckets == 16384
    _, config, model = bench.series_classifier(**bench.SERIES_SHAPE)
    assert isinstance(model, ClassifierEnsemble) and len(model.members) == 5
    assert all(isinstance(m, TransformerClassifier) for m in model.members)
    assert (model.max_sequence_length, model.num_features, model.num_classes) == (251, 1, 3)
    assert config.series_stem == "random_kernels" and config.series_level_features


@pytest.mark.parametrize("kind", ["text", "series"])
def test_every_path_gives_the_classes_of_serving_default(tmp_path, kind):
    """Tiny models through every path at one batch size: the parity check passes,
    and fails once a path answers something else."""
    if kind == "text":
        language = bench.synthetic_language(300)
        task, config, model, _ = bench.text_classifier(200, language, TINY_TEXT)
    else:
        language = None
        task, config, model = bench.series_classifier(12, 30, 2, 3, TINY_SERIES)
    paths, _, sizes = bench.serving_paths(kind, task, config, model, tmp_path / kind, (3,),
                                          verbose=False)
    assert set(paths) == set(bench.PATHS[kind])
    assert set(sizes) == {"tflite_float32_batch_3", "tflite_int8_batch_3"}
    inputs = bench.requests(kind, task, model, 3, seed=1, language=language)
    if kind == "text":
        assert inputs["static_ids"].shape[1] == 16 >= inputs["ids"].shape[1]
    differences, _ = bench.check_parity(paths, inputs, 3)
    assert set(differences) == set(bench.PATHS[kind]) - {bench.BASELINE}
    assert max(d for n, d in differences.items() if "int8" not in n) < 1e-4
    reference = paths[bench.BASELINE][3](inputs)
    classes = reference.shape[-1]
    other = np.eye(classes, dtype=np.float32)[(reference.argmax(-1) + 1) % classes]
    paths["keras"] = {3: lambda _: other}  # sure of another class
    with pytest.raises(AssertionError, match="keras"):
        bench.check_parity(paths, inputs, 3)
