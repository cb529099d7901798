"""Tests for training/data/readers.py: encodings, gzip, alignment, formats."""

import gzip

import numpy as np
import pytest

from training.data.readers import (
    read_classification,
    read_lines,
    read_parallel,
    read_tsv_pairs,
    read_ucr,
)


def _write(path, data):
    path.write_bytes(data)
    return path


def test_read_lines_strips_crlf_bom_and_final_newline(tmp_path):
    path = _write(tmp_path / "a.txt", "\ufeffone\r\ntwo\r\n\r\nthree\n".encode())
    assert read_lines(path) == ["one", "two", "", "three"]
    assert read_lines(_write(tmp_path / "b.txt", b"no final newline")) == [
        "no final newline"
    ]
    assert read_lines(_write(tmp_path / "empty.txt", b"")) == []


def test_gzip_is_detected_by_magic_bytes_not_suffix(tmp_path):
    compressed = _write(tmp_path / "corpus.txt", gzip.compress("grün\nblau\n".encode()))
    plain_with_gz_suffix = _write(tmp_path / "plain.gz", "grün\nblau\n".encode())
    assert read_lines(compressed) == ["grün", "blau"]
    assert read_lines(plain_with_gz_suffix) == ["grün", "blau"]


def test_latin1_nel_byte_does_not_split_lines(tmp_path):
    # 0x85 is U+0085 (NEL) in Latin-1; str.splitlines() would break there.
    path = _write(tmp_path / "latin1.txt", b"it\x85s fine\ncaf\xe9\n")
    assert read_lines(path, encoding="latin-1") == ["it\x85s fine", "café"]


def test_invalid_utf8_error_names_file_line_and_latin1(tmp_path):
    path = _write(tmp_path / "bad.txt", b"ok\nalso ok\nbad \x85 byte\n")
    with pytest.raises(
        ValueError, match=r"bad\.txt.*line 3.*0x85.*encoding=\"latin-1\""
    ):
        read_lines(path)


def test_missing_file_names_argument_and_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"path=.*nothing\.txt"):
        read_lines(tmp_path / "nothing.txt")


def test_read_parallel_aligned_misaligned_and_empty(tmp_path):
    src = _write(tmp_path / "x.en", b"a\nb\nc\n")
    tgt = _write(tmp_path / "x.de", b"A\nB\nC\n")
    short = _write(tmp_path / "short.de", b"A\nB\n")
    empty = _write(tmp_path / "empty.de", b"")
    assert read_parallel(src, tgt) == (["a", "b", "c"], ["A", "B", "C"])
    with pytest.raises(
        ValueError, match=r"x\.en.* has 3 lines.*short\.de.* has 2 lines"
    ):
        read_parallel(src, short)
    with pytest.raises(ValueError, match=r"target_path=.*empty\.de.* is empty"):
        read_parallel(src, empty)


@pytest.mark.parametrize("side", ["source", "target"])
def test_read_parallel_rejects_an_empty_side_naming_file_and_line(tmp_path, side):
    lines = {"source": b"a\nb\nc\n", "target": b"A\nB\nC\n"}
    lines[side] = lines[side].replace(b"b\n" if side == "source" else b"B\n", b" \n")
    src = _write(tmp_path / "x.en", lines["source"])
    tgt = _write(tmp_path / "x.de", lines["target"])
    name = "x.en" if side == "source" else "x.de"
    with pytest.raises(ValueError, match=rf"{side}_path=.*{name}.* line 2 is empty"):
        read_parallel(src, tgt)


def test_read_tsv_pairs_ignores_extra_columns_and_blank_lines(tmp_path):
    path = _write(tmp_path / "pairs.tsv", b"Go.\tGeh.\tCC-BY 2.0\n\nHi.\tHallo!\n")
    assert read_tsv_pairs(path) == (["Go.", "Hi."], ["Geh.", "Hallo!"])
    bad = _write(tmp_path / "bad.tsv", b"Go.\tGeh.\nno tab here\n")
    with pytest.raises(ValueError, match=r"bad\.tsv.*line 2 has no tab"):
        read_tsv_pairs(bad)


def test_read_classification_formats_and_label_order(tmp_path):
    path = _write(tmp_path / "cls.txt", b"10 ten apples\n2\ttwo pears\n2 \n\n1 one\n")
    texts, labels, names = read_classification(path)
    assert names == ["1", "2", "10"]  # Numeric, not lexicographic, order.
    assert texts == ["ten apples", "two pears", "", "one"]
    assert labels == [2, 1, 1, 0]
    texts, labels, names = read_classification(path, label_names=["10", "2", "1"])
    assert labels == [0, 1, 1, 2] and names == ["10", "2", "1"]


def test_read_classification_unknown_label_names_label_and_line(tmp_path):
    path = _write(tmp_path / "cls.txt", b"pos good\nneutral meh\n")
    with pytest.raises(ValueError, match=r"cls\.txt.*line 2.*'neutral'"):
        read_classification(path, label_names=["neg", "pos"])


def test_read_classification_rejects_an_empty_label_naming_file_and_line(tmp_path):
    path = _write(tmp_path / "cls.tsv", b"pos\tgood\n\n \tno label\n")
    with pytest.raises(ValueError, match=r"cls\.tsv.*line 3 has an empty label"):
        read_classification(path)


def test_read_ucr_separators_and_label_remapping(tmp_path):
    path = _write(tmp_path / "ucr.txt", b"-1,0.5,1.5,2\n1\t3\t4\t5\n-1 6  7 NaN\n")
    series, labels, values = read_ucr(path)
    assert series.shape == (3, 3, 1) and series.dtype == np.float32
    np.testing.assert_array_equal(series[1, :, 0], [3, 4, 5])
    assert np.isnan(series[2, 2, 0])
    np.testing.assert_array_equal(labels, [0, 1, 0])
    np.testing.assert_array_equal(values, [-1, 1])
    assert values.dtype.kind == "i"
    _, labels, values = read_ucr(
        _write(tmp_path / "f.txt", b"2.0000e+00 1 2\n1.0000e+00 3 4\n")
    )
    np.testing.assert_array_equal(labels, [1, 0])
    np.testing.assert_array_equal(values, [1, 2])


def test_read_ucr_ragged_rows_raise(tmp_path):
    path = _write(tmp_path / "ragged.txt", b"1,1,2,3\n2,1,2\n")
    with pytest.raises(ValueError, match=r"ragged\.txt.*line 2 has 2 values.*3"):
        read_ucr(path)


@pytest.mark.data
def test_rt_polarity_needs_latin1_and_has_10662_lines(shared_data):
    path = shared_data / "sentence-classification" / "rt-polarity.all"
    with pytest.raises(ValueError, match=r"latin-1"):
        read_lines(path)
    assert len(read_lines(path, encoding="latin-1")) == 10662
    _, labels, names = read_classification(path, encoding="latin-1")
    assert names == ["0", "1"] and np.bincount(labels).tolist() == [5331, 5331]


@pytest.mark.data
def test_real_classification_and_parallel_files(shared_data):
    folder = shared_data / "sentence-classification"
    texts, labels, _ = read_classification(folder / "stsa.binary.train")
    assert len(texts) == 6920 and np.bincount(labels).tolist() == [3310, 3610]
    assert (
        len(read_classification(folder / "custrev.all")[0]) == 3775
    )  # Has label-only lines.
    multi30k = shared_data / "multi30k"
    english, german = read_parallel(multi30k / "val.en.gz", multi30k / "val.de.gz")
    assert len(english) == len(german) == 1014


# --- files cut short, directories, several files ------------------------------


def _cut_gzip(path, lines=2000):
    """A gzip file of `lines` labelled lines, cut in the middle (a copy that stopped)."""
    data = gzip.compress("".join(f"pos\tgood film {i}\n" for i in range(lines)).encode())
    return _write(path, data[: len(data) // 2])


def test_a_gzip_file_cut_short_is_refused_naming_it(tmp_path):
    cut = _cut_gzip(tmp_path / "cut.tsv.gz")
    with pytest.raises(ValueError, match=r"cut.tsv.gz' is not a whole gzip file \(Compressed "
                                         r"file ended before the end-of-stream marker"):
        read_lines(cut)
    from training.data import shards

    with pytest.raises(ValueError, match="cut.tsv.gz' is not a whole gzip file"):
        shards.read_heads([[str(cut)]], 10_000)


def test_a_directory_given_as_a_file_is_named_as_a_directory(tmp_path):
    with pytest.raises(IsADirectoryError, match=rf"path='{tmp_path}' is a directory, not a file"):
        read_lines(tmp_path)


def test_data_files_are_checked_whole_before_any_is_read(tmp_path):
    from training.config import TrainingConfig
    from training.data.common import check_data_files

    good = _write(tmp_path / "good.tsv.gz", gzip.compress(b"pos\tfine\nneg\tbad\n"))
    plain = _write(tmp_path / "plain.tsv", b"pos\tfine\n")
    damaged = bytearray(good.read_bytes())
    damaged[-8] ^= 0xFF  # the CRC of the text
    cases = {
        str(_cut_gzip(tmp_path / "cut.tsv.gz")): (ValueError, "cut.tsv.gz' is not a whole gzip"),
        str(_write(tmp_path / "crc.gz", bytes(damaged))): (ValueError, "crc.gz' is not a whole"),
        str(tmp_path): (IsADirectoryError, f"train_files[0]='{tmp_path}' is a directory"),
        str(tmp_path / "gone.tsv"): (FileNotFoundError, "train_files[0]='"),
        str(tmp_path / "*.none"): (FileNotFoundError, "*.none' matches no file"),
    }
    for path, (error, message) in cases.items():
        config = TrainingConfig(task="classification", dataset="files", train_files=(path,))
        with pytest.raises(error) as raised:
            check_data_files(config)
        assert message in str(raised.value)
    check_data_files(TrainingConfig(task="classification", dataset="files",
                                    train_files=(str(good), str(tmp_path / "*.tsv")),
                                    test_files=(str(plain),)))


@pytest.mark.parametrize("values, message", [
    (dict(task="timeseries", dataset="files", train_files=("a.txt", "b.txt")),
     "`train_files` must hold 1 path(s) for task='timeseries'"),
    (dict(task="classification", dataset="files", train_files=("a",), test_files=("t", "u")),
     "`test_files` must hold 1 path(s) for task='classification'"),
    (dict(task="translation", dataset="files", train_files=("a.src", "a.tgt", "b.src")),
     "`train_files` must hold 2 path(s) for task='translation'"),
    (dict(task="translation", dataset="toy", train_files=("a.src", "a.tgt")),
     "`train_files` is read with dataset='files' only; received train_files=('a.src', "
     "'a.tgt') with dataset='toy'"),
])
def test_files_a_task_would_not_read_are_refused(values, message):
    from training.config import TrainingConfig

    with pytest.raises(ValueError) as raised:
        TrainingConfig(**values).validate()
    assert message in str(raised.value)


def test_text_classification_reads_every_training_file(tmp_path):
    from training.config import load_config
    from training.tasks import get_task

    first = _write(tmp_path / "a.tsv", "".join(f"pos\tgood {i}\n" for i in range(30)).encode())
    second = _write(tmp_path / "b.tsv.gz", gzip.compress(
        "".join(f"mid\tso so {i}\n" for i in range(20)).encode()))
    config = load_config("text_classification", [f'train_files=["{first}", "{second}"]'])
    data = get_task("classification").load_data(config, tmp_path)
    assert data.label_names == ["mid", "pos"]
    texts = set(data.train[0]) | set(data.valid[0])  # a small corpus validates on itself
    assert texts == {f"good {i}" for i in range(30)} | {f"so so {i}" for i in range(20)}
