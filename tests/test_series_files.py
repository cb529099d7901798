"""Series files of several channels: `.ts` (sktime / aeon) and the CSV layout.

The readers (`training.data.series_files`), the series task's choice of
reader by suffix, and `predict --input` on a series file.  Tiny files are
written in `tmp_path`.
"""

import gzip
import pathlib
import re

import numpy as np
import pytest

from training.config import TrainingConfig
from training.data.series_files import read_series_csv, read_ts
from training.runs.predict import read_inputs
from training.tasks import get_task

HEADER = """\
# Two students walked and ran.
@problemName Motion
@timeStamps false
@missing false
@univariate false
@dimensions 2
@equalLength false
@classLabel true walk run
@data
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _ts(tmp_path, data, header=HEADER, name="motion.ts"):
    return _write(tmp_path, name, header + data)


def test_read_ts_multivariate_with_unequal_lengths_and_missing_values(tmp_path):
    path = _ts(tmp_path, "1,2,3:4,5,6:run\n7,?,9,10:11,12,NaN,14:walk\n\n0.5:1.5,2.5:run\n")
    series, labels, label_values, lengths = read_ts(path)
    assert series.dtype == np.float32 and series.shape == (3, 4, 2)
    assert lengths.dtype == np.int32 and lengths.tolist() == [3, 4, 2]
    np.testing.assert_array_equal(series[0, :3], [[1, 4], [2, 5], [3, 6]])
    assert np.isnan(series[0, 3]).all()  # padded at the end
    assert np.isnan(series[1, 1, 0]) and np.isnan(series[1, 2, 1])  # '?' and NaN
    np.testing.assert_array_equal(series[1, 3], [10, 14])
    # A dimension shorter than the series' longest is padded too.
    assert series[2, 0, 0] == 0.5 and np.isnan(series[2, 1, 0])
    np.testing.assert_array_equal(series[2, :2, 1], [1.5, 2.5])
    # Label values in @classLabel order (walk first), not sorted (run first).
    assert label_values.tolist() == ["walk", "run"]
    assert labels.dtype == np.int32 and labels.tolist() == [1, 0, 1]


def test_read_ts_integer_labels_and_order_univariate_and_comments(tmp_path):
    header = HEADER.replace("@classLabel true walk run", "@classlabel true 10 2 7")
    header = header.replace("@dimensions 2", "@dimension 2").replace("@univariate false",
                                                                      "@UNIVARIATE false")
    path = _ts(tmp_path, "1,2:3,4:7\n% an ARFF comment\n5,6:7,8:10\n", header=header)
    series, labels, label_values, _ = read_ts(path)
    assert label_values.dtype == np.int64 and label_values.tolist() == [10, 2, 7]
    assert labels.tolist() == [2, 0] and series.shape == (2, 2, 2)
    # Without a listed order the labels sort, numbers numerically.
    unlisted = _ts(tmp_path, "1:10\n2:2\n3:10\n", name="u.ts", header=(
        "@problemName U\n@univariate true\n@equalLength true\n@seriesLength 1\n"
        "@classLabel true\n@data\n"))
    series, labels, label_values, lengths = read_ts(unlisted)
    assert series.shape == (3, 1, 1) and lengths.tolist() == [1, 1, 1]
    assert label_values.tolist() == [2, 10] and labels.tolist() == [1, 0, 1]


def test_read_ts_without_labels_for_prediction(tmp_path):
    path = _ts(tmp_path, "1,2:3,4\n", header=HEADER.replace("true walk run", "false"))
    series, labels, label_values, lengths = read_ts(path, labels=False)
    assert series.shape == (1, 2, 2) and labels is None and label_values is None
    with pytest.raises(ValueError, match=r"line 9: @classLabel says false"):
        read_ts(path)


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("", None, "is empty"),
        ("@problemName X\n@classLabel true a\n", 2, "without an @data line"),
        ("@problemName X\n1,2:a\n@data\n", 2, "holds data before the @data line"),
        ("@problemName X\n@colour blue\n@data\n1:a\n", 2, "unknown header key '@colour'"),
        ("@problemName X\n@data\n1,2\n", 2, "@classLabel is missing"),
        ("@classLabel true a b\n@dimensions 2\n@data\n1:2:a\n1:b\n", 5,
         "has 1 dimension(s) and the class label, but the file's series have 2"),
        ("@classLabel true a b\n@data\n1,2:3,4:a\n1,x:3,4:b\n", 4, "dimension 1 value 2: 'x'"),
        ("@classLabel true a b\n@data\n1,2:a\n3,4:c\n", 4, "label 'c', which @classLabel"),
        ("@classLabel true a\n@data\n1,inf:a\n", 3, "'inf' is not a number"),
        ("@classLabel true a\n@equalLength true\n@seriesLength 3\n@data\n1,2:a\n", 5,
         "has 2 values, but @equalLength true and the series have 3"),
        ("@timeStamps true\n@classLabel true a\n@data\n(1,2):a\n", 1, "timestamped series"),
        ("@targetLabel true\n@data\n1,2:0.5\n", 1, "regression targets"),
        ("@univariate maybe\n@data\n", 1, "must be true or false"),
        ("@classLabel true a\n@data\n1,2:a\n@missing false\n", 4, "header line after @data"),
        ("@classLabel true a\n@data\n", None, "has no series after @data"),
    ],
)
def test_read_ts_malformed_names_file_and_line(tmp_path, text, line, message):
    path = _write(tmp_path, "bad.ts", text)
    where = re.escape(f"path={path!r}") + (f" line {line}" if line else "")
    with pytest.raises(ValueError, match=where + ".*" + re.escape(message)):
        read_ts(path)


CSV = """\
series_id,channel,label,v1,v2,v3,v4
b,1,run,9,8,7,6
a,0,walk,1,2,3,
a,1,walk,4,,6
b,0,run,5,4,3,2
c,1,walk,1.5,?,,
c,0,walk,0.5,,,
"""


def test_read_series_csv_rows_in_any_order_and_unequal_lengths(tmp_path):
    series, labels, label_values, lengths = read_series_csv(_write(tmp_path, "s.csv", CSV))
    assert series.dtype == np.float32 and series.shape == (3, 4, 2)
    assert lengths.tolist() == [4, 3, 2]  # b, a, c: in order of their first row
    np.testing.assert_array_equal(series[0], [[5, 9], [4, 8], [3, 7], [2, 6]])  # channel 0 first
    np.testing.assert_array_equal(series[1, [0, 2]], [[1, 4], [3, 6]])
    assert np.isnan(series[1, 1, 1]) and np.isnan(series[1, 3]).all()  # inner empty; padding
    assert series[2, 0].tolist() == [0.5, 1.5] and np.isnan(series[2, 1]).all()
    assert label_values.tolist() == ["run", "walk"] and labels.tolist() == [0, 1, 1]
    integers = CSV.replace("run", "3").replace("walk", "12")
    _, labels, label_values, _ = read_series_csv(_write(tmp_path, "i.csv", integers))
    assert label_values.dtype == np.int64 and label_values.tolist() == [3, 12]
    assert labels.tolist() == [0, 1, 1]


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("", None, "is empty"),
        ("id,channel,label,v1\na,0,x,1\n", 1, "header must begin 'series_id,channel,label'"),
        ("series_id,channel,label,v1,v2\na,0,x,1,2\na,1,x,3,4\nb,1,y,5,6\n", 4,
         "series 'b' has no row for channel(s) ['0']"),
        ("series_id,channel,label,v1,v2\na,0,x,1,2\na,1,x,3,oops\n", 3,
         "column 5 ('v2'): 'oops' is not a number"),
        ("series_id,channel,label,v1\na,0,x,1\na,1,y,2\n", 3, "has label 'y' here but 'x'"),
        ("series_id,channel,label,v1\na,0,x,1\na,0,x,2\n", 3, "channel '0' again"),
        ("series_id,channel,label,v1\na,0,,1\n", 2, "has no label"),
        ("series_id,channel,label,v1\n", None, "has no series"),
    ],
)
def test_read_series_csv_malformed_names_file_and_line(tmp_path, text, line, message):
    path = _write(tmp_path, "bad.csv", text)
    where = re.escape(f"path={path!r}") + (f" line {line}" if line else "")
    with pytest.raises(ValueError, match=where + ".*" + re.escape(message)):
        read_series_csv(path)


def _equal_ts(tmp_path, name, rows):
    """A `.ts` file of 3 channels and 5 steps, one row per (seed, label)."""
    header = HEADER.replace("@dimensions 2", "@dimensions 3").replace(
        "@equalLength false", "@equalLength true\n@seriesLength 5")
    lines = []
    for seed, label in rows:
        values = np.random.default_rng(seed).standard_normal((3, 5)).round(3)
        lines.append(":".join(",".join(map(str, v)) for v in values) + f":{label}")
    return _ts(tmp_path, "\n".join(lines) + "\n", header=header, name=name)


def test_series_task_picks_the_reader_by_suffix(tmp_path):
    task = get_task("timeseries")
    train = _equal_ts(tmp_path, "train.ts", [(i, "walk" if i % 2 else "run") for i in range(6)])
    test = _equal_ts(tmp_path, "test.ts", [(10, "run"), (11, "walk")])
    csv = _write(tmp_path, "valid.csv", "series_id,channel,label,v1,v2\n" + "".join(
        f"s{i},{c},{label},{i},{c}\n" for i, label in enumerate(["walk", "run"]) for c in range(3)))
    config = TrainingConfig(task="timeseries", dataset="files", train_files=(train,),
                            test_files=(test,), valid_files=(csv,))
    data = task.load_data(config, tmp_path)
    x, y = data.train
    assert x.shape == (6, 5, 3) and x.dtype == np.float32  # (N, T, C), C > 1
    assert data.label_names == ["walk", "run"] and y.tolist() == [1, 0, 1, 0, 1, 0]
    assert data.test[0].shape == (2, 5, 3) and data.test[1].tolist() == [1, 0]
    np.testing.assert_array_equal(data.valid[0][1], [[1, 1, 1], [0, 1, 2]])  # CSV: (T, C)
    assert data.valid[1].tolist() == [0, 1]
    # The suffix is read without case and without a ".gz" after it.
    packed = tmp_path / "TRAIN.TS.gz"
    packed.write_bytes(gzip.compress(pathlib.Path(train).read_bytes()))
    again = task.load_data(config.replace(train_files=(str(packed),)), tmp_path)
    np.testing.assert_array_equal(again.train[0], x)
    # A file of another suffix is UCR: one channel.
    ucr = _write(tmp_path, "train.txt", "walk 1 2 3\n".replace("walk", "1") + "2 4 5 6\n")
    ucr_data = task.load_data(config.replace(train_files=(ucr,), test_files=(ucr,),
                                             valid_files=()), tmp_path)
    assert ucr_data.train[0].shape == (2, 3, 1)


def test_series_task_reads_unequal_lengths_and_missing_values(tmp_path):
    """NaN-padded to the longest with the missing values as NaN; the recipe's
    data-sized fields follow the longest series."""
    task = get_task("timeseries")
    config = TrainingConfig(task="timeseries", dataset="files")
    ragged = _ts(tmp_path, "1,2,3:4,5,6:run\n7,8:9,?:walk\n1,?,3,4,5:1,2,3,4,5:run\n",
                 name="ragged.ts")
    data = task.load_data(config.replace(train_files=(ragged,)), tmp_path)
    x = data.train[0]
    assert x.shape == (3, 5, 2)
    assert np.isnan(x[0, 3:]).all() and np.isnan(x[1, 2:]).all()  # padding
    assert np.isnan(x[1, 1, 1]) and np.isnan(x[2, 1, 0])  # missing values
    defaults = task.data_defaults(config, data)
    assert defaults["max_sequence_length"] == 5  # the longest series
    assert (defaults["patch_length"], defaults["patch_stride"]) == (2, 1)
    ucr_holes = _write(tmp_path, "holes.tsv", "1\t1\t2\t5\n2\tNaN\t3\tNaN\n")
    ucr = task.load_data(config.replace(train_files=(ucr_holes,)), tmp_path).train[0]
    assert ucr.shape == (2, 3, 1) and np.isnan(ucr[1, [0, 2], 0]).all()


def test_a_series_without_a_known_value_is_refused_naming_file_and_line(tmp_path):
    task = get_task("timeseries")
    config = TrainingConfig(task="timeseries", dataset="files")
    empty = _ts(tmp_path, "1,2,3:4,5,6:run\n?,?:NaN,?:walk\n", name="empty.ts")
    where = f"read_ts: path={empty!r} line {HEADER.count(chr(10)) + 2}"
    with pytest.raises(ValueError, match=re.escape(where) + ".*every value is missing"):
        task.load_data(config.replace(train_files=(empty,)), tmp_path)
    csv = _write(tmp_path, "empty.csv",
                 "series_id,channel,label,v1,v2\na,x,run,1,2\nb,x,walk,?,\n")
    with pytest.raises(ValueError, match=re.escape(f"path={csv!r} line 3: series 'b'")
                       + ".*every value is missing"):
        read_series_csv(csv)
    ucr = _write(tmp_path, "empty.tsv", "1\t1\t2\n2\tNaN\tNaN\n")
    with pytest.raises(ValueError, match=re.escape(f"valid file {ucr!r}: series 2 has no "
                                                   "known value")):
        task.load_data(config.replace(train_files=(ragged_free(tmp_path),),
                                      valid_files=(ucr,)), tmp_path)


def ragged_free(tmp_path):
    return _ts(tmp_path, "1,2,3:4,5,6:run\n7,8,9:9,10,11:walk\n", name="good.ts")


def test_predict_reads_series_files_one_input_a_series(tmp_path):
    path = _ts(tmp_path, "1,2,3:4,5,6:run\n7,8:9,10:walk\n")
    inputs = read_inputs(input_file=path)
    assert [x.shape for x in inputs] == [(3, 2), (2, 2)]  # each its own length
    np.testing.assert_array_equal(inputs[1], [[7, 9], [8, 10]])
    task = get_task("timeseries")
    assert [task.serving().parse_input(x).shape for x in inputs] == [(3, 2), (2, 2)]
    csv = _write(tmp_path, "x.csv", "series_id,channel,label,v1,v2\na,0,,1,2\na,1,,3,4\n")
    assert [x.tolist() for x in read_inputs(input_file=csv)] == [[[1, 3], [2, 4]]]
    # A CSV file of another layout is lines, as before.
    lines = _write(tmp_path, "lines.csv", "1,2,3\n4,5,6\n")
    assert read_inputs(input_file=lines) == ["1,2,3", "4,5,6"]
    holes = _ts(tmp_path, "1,?,3:4,5,6:run\n", name="holes.ts")
    (series,) = read_inputs(input_file=holes)  # a missing value stays NaN: the model fills it
    assert series.shape == (3, 2) and np.isnan(series[1, 0]) and task.serving().parse_input(series) is not None


def test_multivariate_classifier_exports_equal_keras(tmp_path):
    """Three channels read from a `.ts` file: SavedModel and TFLite answer as Keras."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from export.saved_model import export_model
    from export.tflite import export_model_tflite
    from export.tflite_verify import verify_tflite
    from export.verify import compare_outputs, reference_outputs
    from keras_transformer.layers import PatchStem
    from keras_transformer.models import TransformerClassifier

    path = _equal_ts(tmp_path, "x.ts", [(i, "walk" if i % 3 else "run") for i in range(5)])
    series, _, label_values, _ = read_ts(path)
    series = np.concatenate([series, series[:, ::-1]], axis=1) * 2.0  # (5, 10, 3)
    names = label_values.tolist()
    model = TransformerClassifier(
        PatchStem(3, hidden_dim=8, max_sequence_length=10, patch_length=4, patch_stride=2,
                  standardize_series=True),
        num_classes=len(names), num_layers=1, num_heads=2, intermediate_dim=16,
    )
    target = export_model(model, tmp_path / "saved", label_names=names)
    got = tf.saved_model.load(str(target)).signatures["serving_default"](
        features=tf.constant(series.transpose(0, 2, 1)))  # channels first
    expected = reference_outputs(model, series, label_names=names)
    assert got["probabilities"].shape == (5, 2)
    assert compare_outputs({k: v.numpy() for k, v in got.items()}, expected) == []

    tflite = export_model_tflite(model, tmp_path / "x.tflite")
    runner = Interpreter(model_path=tflite).get_signature_runner("serving_default")
    (spec,) = runner.get_input_details().values()
    assert list(spec["shape_signature"]) == [1, 10, 3]
    report = verify_tflite(tflite, model, series)
    assert report["ok"] and report["num_examples"] == 5, report
    assert report["max_abs_diff"] <= 1e-5 and report["label_agreement"] == 1.0
