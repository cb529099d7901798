"""Preset files: `extends` chains, and the errors of a broken chain."""

import json

import pytest

from training.config import available_presets, load_config, read_preset


def _write(folder, name, values):
    path = folder / f"{name}.json"
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


def test_a_preset_extends_its_parent_and_merges_model_overrides(tmp_path):
    _write(tmp_path, "parent", {"_comment": "The parent.", "task": "translation", "epochs": 3,
                                "model_overrides": {"hidden_dim": 32, "num_heads": 2}})
    child = _write(tmp_path, "child", {"_comment": "The child.", "extends": "parent.json",
                                       "epochs": 5, "model_overrides": {"num_heads": 4}})
    values = read_preset(child)
    assert values == {"_comment": "The child.", "task": "translation", "epochs": 5,
                      "model_overrides": {"hidden_dim": 32, "num_heads": 4}}
    config = load_config(child, ["model.num_layers=1"])
    assert config.epochs == 5
    assert config.model_overrides == {"hidden_dim": 32, "num_heads": 4, "num_layers": 1}


def test_a_file_may_extend_a_named_preset(tmp_path):
    child = _write(tmp_path, "mine", {"extends": "multi30k", "source_language": "en",
                                      "target_language": "de"})
    assert load_config(child) == load_config("multi30k_en_de")


def test_the_paper_presets_differ_only_in_the_model_size():
    big, base = read_preset("big"), read_preset("base")
    assert {k for k in big if big[k] != base.get(k)} == {"_comment", "model_preset"}


BROKEN = {
    "a missing parent": ({"child.json": '{"extends": "no_such_preset"}'},
                         r"child.json has extends='no_such_preset', which is not found: "
                         r"Unknown config preset 'no_such_preset'"),
    "a missing parent file": ({"child.json": '{"extends": "gone.json"}'},
                              r"extends='gone.json', which is not found.*gone.json"),
    "a parent that is no name": ({"child.json": '{"extends": ["multi30k"]}'},
                                 r"`extends` must name a preset; received "
                                 r"extends=\['multi30k'\] in child.json"),
    "not JSON": ({"child.json": '{"epochs": 3,\n "task": }'},
                 r"child.json' is not JSON: .*line 2 column"),
    "not an object": ({"child.json": "[1, 2]"},
                      r"child.json' must hold one JSON object of fields; received a list"),
    "a parent that is not an object": ({"child.json": '{"extends": "bad.json"}',
                                        "bad.json": "[1, 2]"},
                                       r"bad.json' must hold one JSON object"),
    "model_overrides not an object": ({"child.json": '{"extends": "tiny", "model_overrides": [64]}'},
                                      r"received model_overrides=\[64\] in child.json"),
}


@pytest.mark.parametrize("files, message", BROKEN.values(), ids=BROKEN)
def test_a_broken_preset_file_is_refused_naming_it(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_config(tmp_path / "child.json")


def test_a_cycle_is_refused_naming_the_chain(tmp_path):
    a = _write(tmp_path, "a", {"extends": "b.json", "epochs": 1})
    _write(tmp_path, "b", {"extends": "c.json"})
    _write(tmp_path, "c", {"extends": "a.json"})
    with pytest.raises(ValueError, match=r"in a cycle: a.json -> b.json -> c.json -> a.json"):
        load_config(a)
    itself = _write(tmp_path, "itself", {"extends": "itself.json"})
    with pytest.raises(ValueError, match=r"in a cycle: itself.json -> itself.json"):
        read_preset(itself)


@pytest.mark.parametrize("preset", available_presets())
def test_every_preset_resolves_to_values_with_its_own_comment(preset):
    values = read_preset(preset)
    assert "extends" not in values and values["_comment"].endswith(".")


def test_the_renamed_series_preset_names_its_new_name():
    with pytest.raises(ValueError, match=r"^The config preset 'series_classification' is now "
                                         r"called 'timeseries': use --config timeseries.$"):
        load_config("series_classification")
    assert load_config("timeseries").series_stem == "random_kernels"
    assert load_config("timeseries").train_files == ()  # generated series without files


# --- types --------------------------------------------------------------------

#: A preset of each task, whose fields the type checks below set.
TASK_PRESETS = {"translation": "tiny", "classification": "trec", "timeseries": "timeseries"}


def _wrong_value(annotation):
    """A JSON value that is not of the field type `annotation` (a string is
    a list of one path for the files fields)."""
    if annotation is str:
        return "[1]"
    return "5" if "tuple" in str(annotation) else '"abc"'


def _typed_fields():
    from training.config import field_types

    for task, preset in TASK_PRESETS.items():
        for name, annotation in field_types(task).items():
            if name != "task":  # `task` chooses the fields; tested below
                yield pytest.param(preset, name, annotation, id=f"{task}-{name}")


@pytest.mark.parametrize("preset, name, annotation", _typed_fields())
def test_every_field_is_type_checked_naming_field_value_and_source(preset, name, annotation):
    raw = _wrong_value(annotation)
    with pytest.raises(ValueError) as error:
        load_config(preset, [f"{name}={raw}"])
    message = str(error.value)
    assert message.startswith(f"`{name}` must be "), message
    assert f"(from --set {name}={raw})" in message


def test_a_wrong_type_in_a_config_file_names_the_file(tmp_path):
    path = _write(tmp_path, "mine", {"extends": "tiny", "label_smoothing": "abc"})
    with pytest.raises(ValueError, match=r"^`label_smoothing` must be a finite number; received "
                                         rf"label_smoothing='abc' \(from {path}\).$"):
        load_config(path)


@pytest.mark.parametrize("override, message", [
    ("epochs=1.5", "`epochs` must be an integer or null; received epochs=1.5"),
    ("seed=true", "`seed` must be an integer; received seed=True"),
    ("lower_case=1", "`lower_case` must be true or false; received lower_case=1"),
    ("learning_rate=NaN", "`learning_rate` must be a finite number or null"),
    ("train_files=[1]", "`train_files` must be a list of strings; received train_files=(1,)"),
    ("task=[1]", "`task` must be one of ['translation', 'classification', 'timeseries']"),
    ("model_overrides=3", "`model_overrides` must be an object; received model_overrides=3"),
    ("model.hidden_dim=abc", "`model.hidden_dim` must be an integer; received "
                             "model.hidden_dim='abc' (from --set model.hidden_dim=abc)"),
    ("model.no_such=1", "Unknown model field 'no_such' (from --set model.no_such=1)"),
    ("model_preset=huge", "`model_preset` must be one of ['base', 'big'"),
    ("encoding=utf8x", "`encoding` must be a text encoding Python knows"),
    ("encoding=base64", "received encoding='base64'"),
    ("seed=-1", "`seed` must be in [0, 2**32); received seed=-1"),
    ("toy_train_size=0", "`toy_train_size` must be a positive integer"),
    ("vocabulary_size=4", "`vocabulary_size` must be at least 5; received vocabulary_size=4"),
    ("max_sequence_length=1", "`max_sequence_length` must be at least 2"),
    ("keep_epoch_checkpoints=-1", "`keep_epoch_checkpoints` must be >= 0"),
    ("model.vocabulary_size=5", "`model.vocabulary_size` is set by the run from the vocabulary"),
    ("model.max_sequence_length=2", "is set by the run from the config's `max_sequence_length`"),
])
def test_a_bad_value_is_refused_before_any_work(override, message):
    with pytest.raises(ValueError) as error:
        load_config("tiny", [override])
    assert message in str(error.value)


def test_numbers_where_they_fit_and_paths_as_strings_pass(tmp_path):
    config = load_config("tiny", ["label_smoothing=0", "learning_rate=1", "model.dropout=0",
                                  "encoding=latin-1"])
    assert (config.label_smoothing, config.learning_rate, config.encoding) == (0, 1, "latin-1")
    from training.config import TrainingConfig

    files = TrainingConfig(dataset="files", train_files=[tmp_path / "a", str(tmp_path / "b")])
    assert files.train_files == (str(tmp_path / "a"), str(tmp_path / "b"))
