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
