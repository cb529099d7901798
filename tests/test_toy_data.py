"""Tests for training/data/toy.py: hand-checked numbers, determinism, files."""

import pytest

from training.data.readers import read_parallel
from training.data.toy import (
    TEMPLATES,
    english_number,
    generate_pairs,
    german_number,
    write_toy_corpus,
)

HAND_CHECKED = [
    (1, "one", "eins"),
    (7, "seven", "sieben"),
    (12, "twelve", "zwölf"),
    (16, "sixteen", "sechzehn"),
    (17, "seventeen", "siebzehn"),
    (21, "twenty one", "ein und zwanzig"),
    (30, "thirty", "dreißig"),
    (101, "one hundred one", "ein hundert eins"),
    (342, "three hundred forty two", "drei hundert zwei und vierzig"),
    (1000, "one thousand", "ein tausend"),
    (1001, "one thousand one", "ein tausend eins"),
    (21000, "twenty one thousand", "ein und zwanzig tausend"),
    (101000, "one hundred one thousand", "ein hundert ein tausend"),
    (
        999999,
        "nine hundred ninety nine thousand nine hundred ninety nine",
        "neun hundert neun und neunzig tausend neun hundert neun und neunzig",
    ),
]


@pytest.mark.parametrize("number, english, german", HAND_CHECKED)
def test_hand_checked_numbers(number, english, german):
    assert english_number(number) == english
    assert german_number(number) == german


@pytest.mark.parametrize("number", [0, 1_000_000, -3, 2.0])
def test_numbers_out_of_range_raise(number):
    with pytest.raises(ValueError, match="number must be an int"):
        english_number(number)


def test_generate_pairs_is_deterministic_distinct_and_uses_every_template():
    pairs = generate_pairs(400, seed=3)
    assert pairs == generate_pairs(400, seed=3)
    assert pairs != generate_pairs(400, seed=4)
    assert len(pairs) == len(set(pairs)) == 400
    for english, german in TEMPLATES:
        prefix_en, prefix_de = english.split("{n}")[0], german.split("{n}")[0]
        assert any(
            en.startswith(prefix_en) and de.startswith(prefix_de) for en, de in pairs
        )


def test_vocabulary_is_closed_and_the_task_needs_reordering():
    words_en = {w for n in range(1, 1000) for w in english_number(n).split()} | {
        "thousand"
    }
    words_de = {w for n in range(1, 1000) for w in german_number(n).split()} | {
        "tausend"
    }
    for english, german in TEMPLATES:
        words_en |= set(english.replace("{n}", "").split())
        words_de |= set(german.replace("{n}", "").split())
    pairs = generate_pairs(300, seed=0)
    assert all(
        set(en.split()) <= words_en and set(de.split()) <= words_de for en, de in pairs
    )
    # Units come before tens in German: word order differs from English.
    assert (
        english_number(45).split()[0] == "forty"
        and german_number(45).split()[0] == "fünf"
    )


def test_write_toy_corpus_writes_disjoint_aligned_splits(tmp_path):
    paths = write_toy_corpus(tmp_path / "toy", n_train=50, n_valid=10, n_test=5, seed=1)
    splits = {
        name: list(zip(*read_parallel(*paths[name]), strict=True)) for name in paths
    }
    assert {name: len(pairs) for name, pairs in splits.items()} == {
        "train": 50,
        "valid": 10,
        "test": 5,
    }
    assert splits["train"] + splits["valid"] + splits["test"] == generate_pairs(
        65, seed=1
    )
    assert not set(splits["train"]) & (set(splits["valid"]) | set(splits["test"]))
    assert sorted(p.name for p in (tmp_path / "toy").iterdir()) == [
        "test.src",
        "test.tgt",
        "train.src",
        "train.tgt",
        "valid.src",
        "valid.tgt",
    ]
