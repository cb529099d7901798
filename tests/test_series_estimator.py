"""`training.data.series_files.write_ts`: series written as a `.ts` file read back exactly."""

import numpy as np
import pytest

from training.data.series_files import read_ts, write_ts


def test_write_ts_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7, 2)).astype(np.float32)
    x[0, 0, 0] = np.float32(0.1)  # no short decimal is this float32
    x[1, 5:] = np.nan  # a shorter series, padded
    x[2, 3, 1] = np.nan  # a missing value
    write_ts(tmp_path / "a.ts", x, [0, 1, 2, 1, 0], ["walk", "run", "10"])
    series, ids, names, _ = read_ts(tmp_path / "a.ts")
    np.testing.assert_array_equal(series, x)  # NaN where NaN, every float32 bit-equal
    assert ids.tolist() == [0, 1, 2, 1, 0] and names.tolist() == ["walk", "run", "10"]
    with pytest.raises(ValueError, match=r"label_names=\['a b', 'c'\]"):
        write_ts(tmp_path / "b.ts", x, [0, 1, 0, 1, 0], ["a b", "c"])
