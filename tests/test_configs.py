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


def test_a_missing_parent_is_named(tmp_path):
    child = _write(tmp_path, "child", {"extends": "no_such_preset"})
    with pytest.raises(ValueError, match=r"child.json has extends='no_such_preset', which is not "
                                         r"found: Unknown config preset 'no_such_preset'"):
        load_config(child)
    child = _write(tmp_path, "child", {"extends": "gone.json"})
    with pytest.raises(ValueError, match=r"extends='gone.json', which is not found.*gone.json"):
        load_config(child)
    child = _write(tmp_path, "child", {"extends": ["multi30k"]})
    with pytest.raises(ValueError, match=r"`extends` must name a preset; received "
                                         r"extends=\['multi30k'\] in child.json"):
        load_config(child)


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


def test_a_file_that_is_not_an_object_of_fields_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"epochs": 3,\n "task": }', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.json' is not JSON: .*line 2 column"):
        load_config(bad)
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.json' must hold one JSON object of fields; "
                                         r"received a list"):
        load_config(bad)
    child = _write(tmp_path, "child", {"extends": "bad.json"})
    with pytest.raises(ValueError, match=r"bad.json' must hold one JSON object"):
        load_config(child)
    child = _write(tmp_path, "child", {"extends": "tiny", "model_overrides": [64]})
    with pytest.raises(ValueError, match=r"received model_overrides=\[64\] in child.json"):
        load_config(child)
