"""The contract every trained task keeps, run end to end on tiny data.

tiny data -> 2 updates -> interrupted -> resumed to the planned 4 -> select
and evaluate -> predict from the run -> export (SavedModel, TFLite) ->
verify both -> predict from the SavedModel: the same lines as from the run.
Translation and series plan with a time budget (timed updates and one
validation, `Task.time_evaluation`, then plan.json, which the resumed run
reuses); text classification trains for its epochs.  The series run is a
two-member `ClassifierEnsemble` (`ensemble_size=2`), the text run one
`TransformerClassifier` with n-gram convolutions and max pooling before and
after its attention, on a whole-word vocabulary (`min_word_count`), trained
with mixup of its pooled features (`mixup_alpha`): both kinds of classifier
keep the contract.
One test over `training.tasks.TASKS`: a new trained task is checked by
adding its tiny config below.
"""

import json
import os

import keras
import numpy as np
import pytest
from export_fixtures import LABEL_NAMES, LABELS, SENTENCES

from cli import training_commands
from export.verify import verify_run_exports
from training.config import load_config
from training.data import synthetic_series
from training.runs.predict import SavedModelPredictor
from training.runs.resume import ResumableCheckpoint
from training.runs.run_dir import load_run
from training.tasks import TASKS
from training.train import train

STEPS = ["epochs=2", "steps_per_epoch=2", "checkpoint_every_steps=2", "keep_epoch_checkpoints=2"]


def _write_text_classification(directory):
    path = directory / "labelled.tsv"
    path.write_text(
        "".join(f"{LABEL_NAMES[y]}\t{s}\n" for s, y in zip(SENTENCES, LABELS, strict=True)),
        encoding="utf-8",
    )
    return path


def _write_series(directory):
    paths = []
    for name, count, seed in (("TRAIN.txt", 40, 0), ("TEST.txt", 12, 1)):
        x, y = synthetic_series.generate_series(count, length=16, seed=seed)
        synthetic_series.write_ucr(directory / name, x, y)
        paths.append(directory / name)
    return paths


def _setup(name, directory):
    """(config overrides, raw inputs to predict) of a tiny run of task `name`."""
    if name == "translation":
        overrides = ["toy_train_size=120", "toy_eval_size=8", "eval_sentences=4",
                     "tokens_per_batch=192", "time_budget_minutes=30"]
        inputs = ["he bought forty two books", "one hundred", "", "zwölf 😀 [UNK]"]
    elif name == "classification":
        path = _write_text_classification(directory)
        overrides = ["task=classification", "dataset=files", f'train_files=["{path}"]',
                     "batch_size=8", "max_sequence_length=16", "label_smoothing=0.0",
                     "ngram_widths=[2,3]", "pooling=max",  # the text presets' front end
                     "min_word_count=2",  # and their whole-word vocabulary
                     "mixup_alpha=0.4"]  # mixed pooled features: a (B, K + 1) training output
        inputs = SENTENCES[:5] + ["", "rain 😀 and unknown words"]
    else:
        train_path, test_path = _write_series(directory)
        overrides = ["task=timeseries", "dataset=ucr", f'train_files=["{train_path}"]',
                     f'test_files=["{test_path}"]', "patch_length=4", "batch_size=8",
                     "max_sequence_length=16", "label_smoothing=0.0", "time_budget_minutes=30",
                     "ensemble_size=2"]  # a ClassifierEnsemble through the whole contract
        rng = np.random.default_rng(0)
        # Two lengths: only series of one length share a batch.
        inputs = [" ".join(f"{v:.3f}" for v in rng.standard_normal(n)) for n in (16, 12, 16)]
    return overrides, inputs


class _Interrupt(keras.callbacks.Callback):
    """Stops the run with an exception once the step-2 checkpoint is written."""

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) >= 2:
            raise KeyboardInterrupt("killed after 2 updates")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, t in TASKS.items() if t.trainable])
def test_task_trains_resumes_predicts_exports_and_verifies(name, tmp_path, monkeypatch, capsys):
    overrides, inputs = _setup(name, tmp_path)
    config = load_config("tiny", STEPS + overrides)
    run_dir = tmp_path / "run"

    task_class = TASKS[name]
    callbacks = task_class.callbacks
    monkeypatch.setattr(task_class, "callbacks",
                        lambda self, *a: [*callbacks(self, *a), _Interrupt()])
    with pytest.raises(KeyboardInterrupt):
        train(config, run_dir, verbose=0)
    monkeypatch.undo()
    checkpoints = ResumableCheckpoint(run_dir / "checkpoints" / "resume", 2)
    assert os.path.basename(checkpoints.latest()) == "step-000000002"
    assert not (run_dir / "metrics.json").exists()

    metrics = train(config, run_dir, verbose=1)  # the same command: resumes
    assert "Resuming" in capsys.readouterr().out
    assert metrics["steps"] == 4 and metrics["plan"]["total_steps"] == 4
    if config.time_budget_minutes:  # planned before the interruption, then reused
        plan = json.loads((run_dir / "plan.json").read_text())
        assert plan == metrics["plan"] and plan["seconds_reserved_for_final"] >= 5.0
    assert metrics["selection"]["selected"] in ("last", "average_last", "average_best")
    assert any(key.startswith("test_") for key in metrics)
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved["steps"] == 4

    run = load_run(run_dir)
    lines = run.predict(inputs)
    assert len(lines) == len(inputs) and all(isinstance(line, str) for line in lines)
    if run.label_names is not None:  # label<TAB>probability
        for line in lines:
            label, probability = line.split("\t")
            assert label in run.label_names and 0.0 <= float(probability) <= 1.0

    saved_model, tflite = tmp_path / "export", tmp_path / "model.tflite"
    run.task_model.export(saved_model, config=run.config)
    run.task_model.export_tflite(tflite)
    report = verify_run_exports(run, saved_model, tflite)
    assert report["ok"], report

    predictor = SavedModelPredictor(saved_model)
    assert predictor.predict(inputs) == lines
    if name == "translation":
        assert predictor.predict(inputs, beam_size=4) == run.predict(inputs, beam_size=4)

    capsys.readouterr()
    assert training_commands.main(["predict", "--run-dir", str(run_dir), *inputs]) == 0
    assert capsys.readouterr().out.splitlines() == lines
