"""Nothing a user types loses their files or answers from a half-written one.

`--overwrite` replaces a run or an export, never a folder of someone's
files; a run replaced by one that fails its data checks is kept; a file of
a finished run or an export that differs from its manifest is named and
never used; a newer format is refused in one line; a resumed run refuses
training files that changed; a write that fails part way leaves the old
file.  One tiny finished run (an untrained 1-layer model, no training) is
built once and copied for each test.
"""

import errno
import hashlib
import json
import os
import pathlib
import shutil
import warnings

import numpy as np
import pytest
from export_fixtures import tiny_tokenizer

from keras_transformer.models import Transformer
from training.config import load_config
from training.data import atomic
from training.data.manifest import (
    MANIFEST,
    OLDER_EXPORT_WARNING,
    check_saved_model_export,
    write_manifest,
)
from training.pipeline import prepared
from training.runs import selection
from training.runs.predict import SavedModelPredictor
from training.runs.run_dir import (
    OLDER_RUN_WARNING,
    RunDirLock,
    finish_run,
    load_run,
    prepare_run_dir,
    write_json_atomically,
)
from training.train import train

FAST = ["epochs=1", "toy_train_size=64", "toy_eval_size=8", "eval_sentences=0",
        "beam_size=1", "checkpoint_every_steps=4", "tokens_per_batch=192"]


def _hashes(root):
    """{relative path: SHA-256} of every file under `root`."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.fixture(scope="module")
def finished_template(tmp_path_factory):
    """A finished run directory as `train` leaves it, without the training."""
    run_dir = tmp_path_factory.mktemp("template") / "run"
    with RunDirLock(run_dir):
        prepare_run_dir(run_dir, load_config("tiny", FAST))
    tokenizer = tiny_tokenizer()
    tokenizer.save(run_dir / "vocab")
    model = Transformer(vocabulary_size=tokenizer.vocabulary_size, num_layers=1,
                        hidden_dim=16, num_heads=2, intermediate_dim=32,
                        max_sequence_length=24, dropout=0.0)
    ids = np.array([[5, 6, 7, 3]], "int32")
    model({"encoder_token_ids": ids, "decoder_token_ids": ids})
    selection.save_final_model(model, os.path.join(run_dir, "model.keras"))
    write_json_atomically(os.path.join(run_dir, "metrics.json"), {"steps": 1})
    (run_dir / "checkpoints" / "scores.json").write_text('{"1": 0.5}')
    finish_run(run_dir)
    return run_dir


@pytest.fixture
def finished_run(finished_template, tmp_path):
    return shutil.copytree(finished_template, tmp_path / "run")


def test_a_finished_run_records_its_files_and_loads(finished_run):
    manifest = json.loads((finished_run / MANIFEST).read_text())
    marker = json.loads((finished_run / "run.json").read_text())
    assert marker["format"] == manifest["format"] == "keras-transformer run"
    assert marker["format_version"] == manifest["format_version"] == 1
    assert {"config.json", "run.json", "vocab/vocab.txt", "vocab/tokenizer.json",
            "model.keras", "metrics.json", "checkpoints/scores.json"} <= set(manifest["files"])
    size = manifest["files"]["model.keras"]["size"]
    assert size == os.path.getsize(finished_run / "model.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checked run loads without a word
        run = load_run(finished_run)
    assert run.metrics == {"steps": 1} and run.tokenizer.vocabulary_size > 4


@pytest.mark.parametrize("name", ["vocab/vocab.txt", "model.keras", "metrics.json",
                                  "config.json"])
def test_a_file_cut_short_is_named_and_never_used(finished_run, name):
    path = finished_run / name
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError) as caught:
        load_run(finished_run)
    message = str(caught.value)
    assert name in message and "cut short" in message and "\n" not in message


def test_a_file_changed_in_place_is_named(finished_run):
    path = finished_run / "vocab" / "vocab.txt"
    lines = path.read_text().splitlines()
    lines[10], lines[11] = lines[11], lines[10]  # same size, another vocabulary
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="vocab/vocab.txt differs from the SHA-256"):
        load_run(finished_run)
    os.remove(path)
    with pytest.raises(ValueError, match="vocab/vocab.txt is missing"):
        load_run(finished_run)


def test_a_run_of_a_newer_format_is_refused_in_one_line(finished_run):
    marker = json.loads((finished_run / "run.json").read_text())
    (finished_run / "run.json").write_text(json.dumps(dict(marker, format_version=2)))
    for call in (lambda: load_run(finished_run),
                 lambda: prepare_run_dir(finished_run, load_config("tiny", FAST))):
        with pytest.raises(ValueError) as caught:
            call()
        message = str(caught.value)
        assert "format version 2" in message and "upgrade keras-transformer" in message
        assert "\n" not in message


def test_a_run_written_before_run_json_is_read_with_a_warning(finished_run):
    os.remove(finished_run / "run.json")
    os.remove(finished_run / MANIFEST)
    with pytest.warns(UserWarning) as caught:
        run = load_run(finished_run)
    assert [str(w.message) for w in caught] == [OLDER_RUN_WARNING.format(
        run_dir=str(finished_run))]
    assert run.metrics == {"steps": 1}
    # ... and it is a run: --overwrite replaces it (set aside until a checkpoint).
    assert prepare_run_dir(finished_run, load_config("tiny", FAST + ["seed=2"]),
                           overwrite=True) is False
    assert (finished_run.parent / ".run.replaced" / "model.keras").exists()


def test_a_run_stopped_while_finishing_is_named_and_finished_on_rerun(finished_run):
    os.remove(finished_run / MANIFEST)
    with pytest.raises(FileNotFoundError, match="the same train command again"):
        load_run(finished_run)
    with pytest.raises(FileExistsError, match="finished run"):
        prepare_run_dir(finished_run, load_config("tiny", FAST))
    assert load_run(finished_run).metrics == {"steps": 1}  # the rerun wrote its manifest


def _user_folder(root):
    notes = root / "notes"
    (notes / "drafts").mkdir(parents=True)
    (notes / "todo.txt").write_text("buy milk\n")
    (notes / "drafts" / "letter.md").write_text("Dear ...\n")
    (notes / "config.json").write_text('{"mine": true}\n')  # a name a run uses too
    return notes


def test_overwrite_never_touches_a_folder_that_is_not_a_run(tmp_path):
    notes = _user_folder(tmp_path)
    before = _hashes(tmp_path)
    typo = load_config("tiny", FAST + ["dataset=files",
                                        f'train_files=["{tmp_path}/nope.src", "x.tgt"]'])
    with pytest.raises(FileNotFoundError, match="nope.src"):  # the data are checked first
        train(typo, notes, overwrite=True, verbose=0)
    for overwrite in (True, False):
        with pytest.raises(FileExistsError, match="not a run directory") as caught:
            train(load_config("tiny", FAST), notes, overwrite=overwrite, verbose=0)
        assert "\n" not in str(caught.value) and str(notes) in str(caught.value)
    assert _hashes(tmp_path) == before
    assert sorted(os.listdir(notes)) == ["config.json", "drafts", "todo.txt"]  # no lock file


def test_overwrite_refuses_a_run_holding_other_files(finished_run):
    (finished_run / "notes.txt").write_text("mine")
    before = _hashes(finished_run)
    with pytest.raises(FileExistsError, match=r"does not write \(\['notes.txt'\]\)"):
        prepare_run_dir(finished_run, load_config("tiny", FAST + ["seed=2"]), overwrite=True)
    assert _hashes(finished_run) == before


def test_a_replacement_that_fails_its_data_checks_keeps_the_old_run(finished_run, tmp_path):
    before = _hashes(finished_run)
    typo = load_config("tiny", FAST + ["dataset=files",
                                        f'train_files=["{tmp_path}/nope.src", "x.tgt"]'])
    with pytest.raises(FileNotFoundError, match="nope.src"):
        train(typo, finished_run, overwrite=True, verbose=0)
    assert _hashes(finished_run) == before
    assert sorted(os.listdir(tmp_path)) == ["run"]  # nothing set aside is left
    assert load_run(finished_run).metrics == {"steps": 1}


def test_a_new_run_that_fails_its_data_checks_leaves_nothing(tmp_path):
    typo = load_config("tiny", FAST + ["dataset=files",
                                        f'train_files=["{tmp_path}/nope.src", "x.tgt"]'])
    with pytest.raises(FileNotFoundError, match="nope.src"):
        train(typo, tmp_path / "run", verbose=0)
    assert os.listdir(tmp_path) == []  # not left pinned to the config that failed
    (tmp_path / "empty").mkdir()  # a folder made for the run: left as it was, empty
    with pytest.raises(FileNotFoundError, match="nope.src"):
        train(typo, tmp_path / "empty", verbose=0)
    assert os.listdir(tmp_path / "empty") == []


def test_a_run_killed_while_writing_its_first_file_starts_afresh(tmp_path):
    """A kill inside the first write leaves an empty checkpoints/ and a
    temporary: the same command starts the run; a user's file beside them
    still makes the folder someone else's."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / ".config.json.tmp-abc123").write_text('{"task": "transl')
    config = load_config("tiny", FAST)
    assert prepare_run_dir(run_dir, config) is False
    assert sorted(os.listdir(run_dir)) == ["checkpoints", "config.json", "run.json"]
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    (other / ".config.json.tmp-abc123").write_text("{")
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a run directory"):
        prepare_run_dir(other, config)
    assert sorted(os.listdir(other)) == [".config.json.tmp-abc123", "checkpoints", "notes.txt"]


def test_a_replacement_killed_before_its_checkpoint_keeps_the_old_run_aside(finished_run):
    """As a SIGKILL leaves it: the old run aside, the new one unstarted."""
    before = _hashes(finished_run)
    del before[".lock"]  # stays with the run directory, for the process holding it
    config = load_config("tiny", FAST + ["seed=2"])
    prepare_run_dir(finished_run, config, overwrite=True)
    aside = finished_run.parent / ".run.replaced"
    assert _hashes(aside) == before
    # Another --overwrite keeps that run aside, not the unstarted one.
    prepare_run_dir(finished_run, config.replace(seed=3), overwrite=True)
    assert _hashes(aside) == before
    # The new run's first checkpoint drops it.
    from training.runs.run_dir import drop_replaced_run
    (finished_run / "checkpoints" / "resume").mkdir()
    (finished_run / "checkpoints" / "resume" / "LATEST").write_text("step-000000004")
    assert drop_replaced_run(finished_run) and not aside.exists()


def test_a_replacement_killed_before_its_first_file_puts_the_old_run_back(finished_run):
    before = _hashes(finished_run)
    del before[".lock"]
    config = load_config("tiny", FAST + ["seed=2"])
    prepare_run_dir(finished_run, config, overwrite=True)
    for name in ("config.json", "run.json", "checkpoints"):  # as if killed at the set-aside
        shutil.rmtree(finished_run / name, ignore_errors=True)
        if (finished_run / name).exists():
            os.remove(finished_run / name)
    with pytest.raises(FileExistsError, match="finished run"):  # the old command, again
        prepare_run_dir(finished_run, load_config("tiny", FAST))
    assert {k: v for k, v in _hashes(finished_run).items() if k != ".lock"} == before
    assert not (finished_run.parent / ".run.replaced").exists()


def test_resume_refuses_a_training_file_that_changed(tmp_path):
    src, tgt = tmp_path / "a.src", tmp_path / "a.tgt"
    src.write_text("one\ntwo\n")
    tgt.write_text("eins\nzwei\n")
    config = load_config("tiny", FAST + ["dataset=files", f'train_files=["{src}", "{tgt}"]'])
    run_dir = tmp_path / "run"
    assert prepare_run_dir(run_dir, config) is False
    assert prepare_run_dir(run_dir, config) is True  # the same files: resumes
    src.write_text("one\nsix\n")  # the same size, other text
    with pytest.raises(ValueError) as caught:
        prepare_run_dir(run_dir, config)
    message = str(caught.value)
    assert repr(str(src)) in message and "changed" in message and "\n" not in message
    src.write_text("one\n")
    with pytest.raises(ValueError, match="has 4 bytes where it had 8"):
        prepare_run_dir(run_dir, config)


def test_resume_refuses_a_new_file_matching_a_pattern(tmp_path):
    for name in ("a.1.src", "a.1.tgt"):
        (tmp_path / name).write_text("one\n")
    config = load_config("tiny", FAST + [
        "dataset=files", f'train_files=["{tmp_path}/a.*.src", "{tmp_path}/a.*.tgt"]'])
    prepare_run_dir(tmp_path / "run", config)
    (tmp_path / "a.2.src").write_text("two\n")
    with pytest.raises(ValueError, match="a.2.src' appeared since the run started"):
        prepare_run_dir(tmp_path / "run", config)


class _HalfThenFull:
    """A file whose write stores half of the bytes and fails: a full disk."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return self.f.__exit__(*exc_info)


def test_a_write_that_fails_part_way_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    atomic.atomic_write_json(path, {"old": 1})
    fdopen = os.fdopen
    monkeypatch.setattr(atomic.os, "fdopen", lambda fd, mode: _HalfThenFull(fdopen(fd, mode)))
    with pytest.raises(OSError, match="No space left"):
        atomic.atomic_write_json(path, {"new": list(range(1000))})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"old": 1}
    assert os.listdir(tmp_path) == ["metrics.json"]  # no temporary left
    # A writer that takes a path (`model.save`): the same.
    with pytest.raises(OSError, match="No space"):
        with atomic.atomic_path(path) as staged:
            with open(staged, "w") as f:
                f.write("{half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert json.loads(path.read_text()) == {"old": 1}
    assert os.listdir(tmp_path) == ["metrics.json"]


def _fake_saved_model(folder):
    (folder / "assets").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph" * 100)
    (folder / "assets" / "config.json").write_text('{"task": "translation"}')
    return folder


def test_an_export_with_a_changed_file_is_refused_before_it_loads(tmp_path):
    export_dir = _fake_saved_model(tmp_path / "export")
    write_manifest(export_dir, "saved_model")
    check_saved_model_export(export_dir)
    (export_dir / "saved_model.pb").write_bytes(b"graph" * 50)
    with pytest.raises(ValueError, match="saved_model.pb has 250 bytes where") as caught:
        SavedModelPredictor(export_dir)  # refused before tf.saved_model.load reads it
    assert "\n" not in str(caught.value)
    manifest = json.loads((export_dir / MANIFEST).read_text())
    (export_dir / MANIFEST).write_text(json.dumps(dict(manifest, format_version=7)))
    with pytest.raises(ValueError, match="format version 7.*upgrade keras-transformer"):
        check_saved_model_export(export_dir)


def test_an_export_written_before_manifests_is_read_with_a_warning(tmp_path):
    export_dir = _fake_saved_model(tmp_path / "export")
    with pytest.warns(UserWarning) as caught:
        check_saved_model_export(export_dir)
    assert [str(w.message) for w in caught] == [
        OLDER_EXPORT_WARNING.format(what=f"--saved-model {str(export_dir)!r}")]
    with pytest.raises(FileNotFoundError, match="not a keras-transformer saved_model export"):
        check_saved_model_export(tmp_path)


def test_export_and_prepare_overwrite_only_their_own_outputs(tmp_path):
    from export.saved_model import REPLACEABLE as SAVED_MODEL
    from export.tflite import REPLACEABLE as TFLITE

    notes = _user_folder(tmp_path)
    (tmp_path / "model.tflite").write_bytes(b"my own file")
    before = _hashes(tmp_path)
    for target, replaceable in ((notes, SAVED_MODEL), (notes, prepared.REPLACEABLE),
                                (tmp_path / "model.tflite", TFLITE)):
        with pytest.raises(FileExistsError, match="nothing was changed"):
            with atomic.atomic_directory(target, True, replaceable):
                pytest.fail("the body runs only for a target it may replace")
    assert _hashes(tmp_path) == before
    # Their own outputs they replace.
    export_dir = _fake_saved_model(tmp_path / "export")
    with atomic.atomic_directory(export_dir, True, SAVED_MODEL) as staged:
        _fake_saved_model(pathlib.Path(staged) / "x")
    assert os.listdir(export_dir) == ["x"]
    tflite = tmp_path / "ok.tflite"
    tflite.write_bytes(b"\0\0\0\0TFL3rest")
    atomic.atomic_write_bytes(tflite, b"\0\0\0\0TFL3new", True, TFLITE)
    assert tflite.read_bytes() == b"\0\0\0\0TFL3new"


def test_a_prepared_corpus_of_a_newer_format_is_refused(tmp_path):
    (tmp_path / prepared.MANIFEST).write_text(json.dumps({
        "format": "keras-transformer prepared corpus", "format_version": 2,
        "package_version": "9.0"}))
    with pytest.raises(ValueError, match="format version 2 .*upgrade keras-transformer"):
        prepared.read_manifest(tmp_path)


def test_predict_from_a_missing_export_is_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory") as caught:
        SavedModelPredictor(tmp_path / "nope")
    assert "\n" not in str(caught.value)
