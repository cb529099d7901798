"""A run killed at any write, or out of disk space part way, is never silently different.

One process trains a tiny run once and, at every rename its files go
through (each a point where a write becomes visible), copies the run
directory as it is on disk just before and just after: what a SIGKILL
there leaves (a kill loses nothing the kernel already holds, so the disk is
the process's last state), with any temporary caught mid-write cut to half
its bytes.  Each copy is then resumed by the same `train` call, in this
process: it must end with the uninterrupted run's weights, or refuse in one
line naming what to do.  No TensorFlow is launched per point.
"""

import errno
import os
import shutil

import numpy as np
import pytest

from training.config import load_config
from training.runs.run_dir import load_run
from training.train import train

# A two-epoch run of a small Kim CNN on a tiny labelled file, a checkpoint
# every 3 updates, deterministic: a vocabulary, checkpoints, selection and a
# final evaluation like any run, at the cost of the cheapest model that has
# them (a translation run's greedy decoding is traced again by every resume).
OVERRIDES = [
    "epochs=2",
    "batch_size=8",
    "ensemble_size=1",
    "cross_fit=false",
    "char_ngram_buckets=0",
    "mixup_alpha=0",
    "min_word_count=1",
    "checkpoint_every_steps=3",
    "deterministic=true",
]
WORDS = (("good", "great", "fine", "warm"), ("bad", "dull", "poor", "cold"))


def _labelled_file(path, count, seed):
    """`count` lines `label<TAB>text`, each class saying its own words among shared ones."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        words = [*rng.choice(WORDS[i % 2], 3), *rng.choice(["the", "a", "film", "plot"], 3)]
        lines.append(f"{'pos' if i % 2 else 'neg'}\t{' '.join(rng.permutation(words))}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


#: Crash points resumed: every write of these files, before and after,
#: then points spread over the rest (the checkpoints', scores', plan's ...).
WRITTEN = ("config.json", "vocab/vocab.txt", "checkpoints/resume/LATEST", "model.keras",
           "metrics.json", "manifest.json")
POINTS = 20


def _weights(run_dir):
    return [np.asarray(w) for w in load_run(run_dir).model.weights]


def _same_weights(a, b):
    return len(a) == len(b) and all(
        x.shape == y.shape and np.allclose(x, y, rtol=0, atol=1e-6) for x, y in zip(a, b, strict=True))


class CrashImages:
    """Copies of `run_dir` at each rename inside it, before and after."""

    def __init__(self, run_dir, folder):
        self.run_dir, self.folder = os.path.abspath(run_dir), folder
        self.points = []  # (what, path of the copy)

    def take(self, what):
        if not os.path.isdir(self.run_dir):
            return
        copy = os.path.join(self.folder, f"{len(self.points):03d}")
        shutil.copytree(self.run_dir, copy, symlinks=True)
        for root, _, names in os.walk(copy):
            for name in names:
                if ".tmp-" in name:  # caught mid-write: half of it on disk
                    path = os.path.join(root, name)
                    os.truncate(path, os.path.getsize(path) // 2)
        self.points.append((what, copy))

    def wrap(self, rename):
        def renamed(src, dst, *args, **kwargs):
            inside = os.path.abspath(os.fspath(dst)).startswith(self.run_dir + os.sep)
            name = os.path.relpath(os.fspath(dst), self.run_dir) if inside else None
            if inside:
                self.take(f"before {name}")
            rename(src, dst, *args, **kwargs)
            if inside:
                self.take(f"after {name}")
        return renamed


def _chosen(whats):
    """Indices of `POINTS` crash points: the first write of each of `WRITTEN`,
    before and after, then others spread evenly over the run."""
    first = [whats.index(f"{when} {name}") for name in WRITTEN for when in ("before", "after")]
    rest = [i for i in range(len(whats)) if i not in first]
    spread = [rest[round(k * (len(rest) - 1) / (POINTS - len(first) - 1))]
              for k in range(POINTS - len(first))]
    return sorted(set(first + spread))


def _resume(config, copy, reference):
    """'same', or 'refused: <message>' for a one-line refusal; fails on
    anything else (a different model, a traceback-worthy error)."""
    try:
        train(config, copy, verbose=0)
    except (ValueError, OSError) as error:
        message = str(error)
        assert "\n" not in message, message
        if "holds a finished run" not in message:
            return f"refused: {message}"
    return "same" if _same_weights(_weights(copy), reference) else "different"


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory):
    """(config, the uninterrupted run's weights, its crash images): one tiny run."""
    tmp_path = tmp_path_factory.mktemp("crash")
    files = [f'train_files=["{_labelled_file(tmp_path / "train.tsv", 64, 0)}"]',
             f'test_files=["{_labelled_file(tmp_path / "test.tsv", 16, 1)}"]']
    config = load_config("text_classification", [*files, *OVERRIDES])
    run_dir = tmp_path / "run"
    images = CrashImages(run_dir, tmp_path / "images")
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(os, "replace", images.wrap(os.replace))
        patched.setattr(os, "rename", images.wrap(os.rename))
        train(config, run_dir, verbose=0)
    return config, _weights(run_dir), images.points


@pytest.mark.slow
def test_a_run_killed_at_any_write_resumes_to_the_same_weights_or_refuses(crashed_run):
    config, reference, points = crashed_run
    whats = [what for what, _ in points]
    for written in WRITTEN:
        assert f"before {written}" in whats and f"after {written}" in whats, (written, whats)
    chosen = _chosen(whats)
    assert len(chosen) == POINTS, whats

    outcomes = {}
    for i in chosen:
        what, copy = points[i]
        outcomes[f"{i}: {what}"] = _resume(config, copy, reference)
    different = [what for what, outcome in outcomes.items() if outcome == "different"]
    assert different == [], different
    refused = {what: o for what, o in outcomes.items() if o.startswith("refused")}
    assert refused == {}, refused  # a refusal would be one line; none is needed
    print(f"{len(points)} crash points, {len(outcomes)} resumed: "
          f"{len(outcomes) - len(refused)} to the same weights, {len(refused)} refused "
          f"{refused}, 0 different")


@pytest.mark.slow
def test_a_write_out_of_space_part_way_leaves_the_last_good_state(crashed_run, tmp_path):
    """ENOSPC from the first fsync of a checkpoint ends the run with that
    error; the same command, failing again at the first fsync of model.keras,
    too; the third ends with the weights of a run that never failed.  No
    failed write leaves a temporary."""
    config, reference, _ = crashed_run
    run_dir = tmp_path / "run"
    fsync = os.fsync
    for failing in ("checkpoints/resume", "model.keras"):
        failed = []

        def fsync_out_of_space(descriptor, failing=failing, failed=failed):
            path = os.readlink(f"/proc/self/fd/{descriptor}")
            if failing in path and not failed:
                failed.append(path)
                raise OSError(errno.ENOSPC, "No space left on device", path)
            return fsync(descriptor)

        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(os, "fsync", fsync_out_of_space)
            with pytest.raises(OSError) as raised:
                train(config, run_dir, verbose=0)
        assert raised.value.errno == errno.ENOSPC and failing in failed[0]
        assert not list(run_dir.rglob(".*.tmp-*")), "a failed write leaves no temporary"
    train(config, run_dir, verbose=0)
    assert _same_weights(_weights(run_dir), reference)
