"""Writes UCR/UEA sets that sktime ships as `.ts` files, to train from.

sktime carries a few archive sets in its package data (BasicMotions: 6
channels, accelerometer and gyroscope, 4 classes, 40 training and 40 test
series of 100 steps; GunPoint and ItalyPowerDemand: one channel, the
held-out sets of `bench_series_recipe.py`).  This script loads one split at a time with sktime's
reader and writes it back with sktime's writer, so the files are `.ts` as
sktime writes them (not only as the archive ships them):

    python3 benchmarks/write_uea_ts.py --out ../shared/data/uea
    python3 benchmarks/write_uea_ts.py --name GunPoint ItalyPowerDemand --out runs/uea
    python3 -m training train --config timeseries --run-dir runs/basic_motions \\
        --set 'train_files=["../shared/data/uea/BasicMotions/BasicMotions_TRAIN.ts"]' \\
        --set 'test_files=["../shared/data/uea/BasicMotions/BasicMotions_TEST.ts"]'

sktime is a benchmark-only dependency (`pip install -e ".[bench]"`); the
package reads `.ts` files without it (`training.data.series_files.read_ts`).
"""

import argparse
import os
import shutil

import numpy as np


def shipped_file(name, split):
    """The path of sktime's own copy of `name`'s `split` ("TRAIN" / "TEST")."""
    import sktime.datasets

    folder = os.path.join(os.path.dirname(sktime.datasets.__file__), "data", name)
    path = os.path.join(folder, f"{name}_{split}.ts")
    if not os.path.isfile(path):
        shipped = sorted(d for d in os.listdir(os.path.dirname(folder))
                         if os.path.isfile(os.path.join(os.path.dirname(folder), d,
                                                        f"{d}_TRAIN.ts")))
        raise SystemExit(f"sktime ships no {name!r} set; it ships {shipped}.")
    return path


def write_split(name, split, out_dir):
    """Reads one split with sktime and writes it to `out_dir/name/name_SPLIT.ts`."""
    from sktime.datasets import load_from_tsfile, write_ndarray_to_tsfile

    with open(shipped_file(name, split), encoding="utf-8") as f:
        equal = not any(line.lower().startswith("@equallength false") for line in f)
    if not equal:  # series of their own lengths: sktime's own file, as it is
        path = os.path.join(out_dir, name, f"{name}_{split}.ts")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(shipped_file(name, split), path)
        print(f"{path}: sktime's copy (series of unequal lengths)")
        return path
    series, labels = load_from_tsfile(shipped_file(name, split), return_data_type="numpy3D")
    # sktime's reader lowercases the labels; the shipped header has them in
    # their own spelling and order, which the written file keeps.
    with open(shipped_file(name, split), encoding="utf-8") as f:
        header = next(line for line in f if line.lower().startswith("@classlabel"))
    class_labels = header.split()[2:] or sorted(set(labels))
    spelling = {label.lower(): label for label in class_labels}
    write_ndarray_to_tsfile(
        series, out_dir, problem_name=name, class_label=class_labels,
        class_value_list=np.asarray([spelling.get(y, y) for y in labels]), equal_length=True,
        series_length=series.shape[-1], fold=f"_{split}",
    )
    path = os.path.join(out_dir, name, f"{name}_{split}.ts")
    print(f"{path}: {series.shape[0]} series, {series.shape[1]} channels, "
          f"{series.shape[2]} steps, classes {class_labels}")
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", nargs="+", default=["BasicMotions"],
                        help="sets sktime ships (default BasicMotions); one of unequal lengths is copied as it is")
    parser.add_argument("--out", required=True, help="folder to write NAME/NAME_SPLIT.ts in")
    args = parser.parse_args()
    for name in args.name:
        for split in ("TRAIN", "TEST"):
            write_split(name, split, args.out)


if __name__ == "__main__":
    main()
