"""A generated English -> German toy translation task: numbers in words.

The task is small enough to train in minutes on a CPU, yet not solvable by
copying tokens one by one: German puts the units before the tens
(42 -> "zwei und vierzig" for "forty two"), has irregular words
(16 -> "sechzehn", 30 -> "dreißig"), and the sentence templates move words
around the number ("he bought 7 books yesterday" ->
"er hat gestern sieben bücher gekauft"). Numbers range over 1..999,999.

German compounds are split at their parts so both sides tokenise on spaces:
"dreihundertzweiundvierzig" is written "drei hundert zwei und vierzig". A
trailing 1 is "eins" and a 1 inside a compound is "ein" ("ein und zwanzig",
"ein hundert eins", "ein tausend"). This is a toy; it does not decline "ein".

Example:

```python
from training.data.toy import generate_pairs, write_toy_corpus

generate_pairs(2, seed=0)
# [("she has read seven thousand eight hundred ninety pages today",
#   "sie hat heute sieben tausend acht hundert neunzig seiten gelesen"),
#  ("six hundred twenty three", "sechs hundert drei und zwanzig")]
write_toy_corpus("runs/toy", n_train=20000, n_valid=500, n_test=500, seed=0)
```
"""

import os
import random

MAX_NUMBER = 999_999
MAX_PAIRS = 1_000_000

_EN_ONES = (
    "", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
    "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_EN_TENS = (
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
    "ninety",
)  # fmt: skip
_DE_UNITS = (
    "",
    "ein",
    "zwei",
    "drei",
    "vier",
    "fünf",
    "sechs",
    "sieben",
    "acht",
    "neun",
)
_DE_TEENS = (
    "zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn",
    "siebzehn", "achtzehn", "neunzehn",
)  # fmt: skip
_DE_TENS = (
    "", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig",
    "achtzig", "neunzig",
)  # fmt: skip

# (English, German) templates; "{n}" is replaced by the number in words. All
# but the first use a plural noun, so their numbers start at 2.
TEMPLATES = (
    ("{n}", "{n}"),
    ("i have {n} apples", "ich habe {n} äpfel"),
    ("there are {n} cats in the garden", "im garten sind {n} katzen"),
    ("he bought {n} books yesterday", "er hat gestern {n} bücher gekauft"),
    ("we need {n} more chairs", "wir brauchen {n} weitere stühle"),
    ("the city has {n} inhabitants", "die stadt hat {n} einwohner"),
    ("she has read {n} pages today", "sie hat heute {n} seiten gelesen"),
)


def _check_number(number):
    if not isinstance(number, int) or not 1 <= number <= MAX_NUMBER:
        raise ValueError(
            f"number must be an int in [1, {MAX_NUMBER}], received {number!r}."
        )


def _english_below_thousand(number):
    hundreds, rest = divmod(number, 100)
    words = [_EN_ONES[hundreds], "hundred"] if hundreds else []
    if rest >= 20:
        words.append(_EN_TENS[rest // 10])
        rest %= 10
    if rest:
        words.append(_EN_ONES[rest])
    return words


def english_number(number):
    """Writes 1..999,999 in English words ("three hundred forty two").

    Args:
        number: An int in [1, 999999].

    Returns:
        The words joined by single spaces (no "and", no hyphens).
    """
    _check_number(number)
    thousands, rest = divmod(number, 1000)
    words = _english_below_thousand(thousands) + ["thousand"] if thousands else []
    return " ".join(words + _english_below_thousand(rest))


def _german_below_thousand(number, final):
    """Words for 0..999; `final` picks "eins" over "ein" for a trailing 1."""
    hundreds, rest = divmod(number, 100)
    words = [_DE_UNITS[hundreds], "hundert"] if hundreds else []
    units, tens = rest % 10, rest // 10
    if tens == 1:
        words.append(_DE_TEENS[units])
    elif tens >= 2:
        words += (
            [_DE_UNITS[units], "und", _DE_TENS[tens]] if units else [_DE_TENS[tens]]
        )
    elif units:
        words.append("eins" if units == 1 and final else _DE_UNITS[units])
    return words


def german_number(number):
    """Writes 1..999,999 in German words, compounds split at their parts.

    Args:
        number: An int in [1, 999999].

    Returns:
        The words joined by single spaces, e.g. 342 ->
        "drei hundert zwei und vierzig".
    """
    _check_number(number)
    thousands, rest = divmod(number, 1000)
    words = (
        _german_below_thousand(thousands, final=False) + ["tausend"]
        if thousands
        else []
    )
    return " ".join(words + _german_below_thousand(rest, final=True))


def _sample_number(rng):
    # Digit count first, then the value: short numbers are as frequent as long
    # ones, instead of 90% of draws having six digits.
    digits = rng.randint(1, 6)
    return rng.randint(max(1, 10 ** (digits - 1)), 10**digits - 1)


def generate_pairs(n, seed=0):
    """Generates `n` distinct (English, German) sentence pairs.

    Args:
        n: Number of pairs, at most 1,000,000.
        seed: Seed of the private `random.Random`; equal seeds give equal
            lists, independent of any global random state.

    Returns:
        A list of `(source, target)` string tuples.

    Raises:
        ValueError: If `n` is negative or larger than 1,000,000.
    """
    if not isinstance(n, int) or not 0 <= n <= MAX_PAIRS:
        raise ValueError(f"n must be an int in [0, {MAX_PAIRS}], received {n!r}.")
    rng = random.Random(seed)
    pairs, seen = [], set()
    while len(pairs) < n:
        english, german = TEMPLATES[rng.randrange(len(TEMPLATES))]
        number = _sample_number(rng)
        if english != "{n}":
            number = max(number, 2)
        pair = (
            english.format(n=english_number(number)),
            german.format(n=german_number(number)),
        )
        if pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    return pairs


def write_toy_corpus(directory, n_train=20000, n_valid=500, n_test=500, seed=0):
    """Writes disjoint train/valid/test splits as `<split>.src` / `<split>.tgt`.

    The files are UTF-8, one sentence per line, line i of `.src` aligned with
    line i of `.tgt`; read them back with `training.data.readers.read_parallel`.

    Args:
        directory: Output folder, created when missing.
        n_train: Number of training pairs.
        n_valid: Number of validation pairs.
        n_test: Number of test pairs.
        seed: Seed for `generate_pairs`.

    Returns:
        A dict `{split: (source_path, target_path)}` for "train", "valid" and
        "test".
    """
    sizes = {"train": n_train, "valid": n_valid, "test": n_test}
    for name, size in sizes.items():
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"n_{name} must be a non-negative int, received {size!r}.")
    pairs = generate_pairs(sum(sizes.values()), seed=seed)
    os.makedirs(directory, exist_ok=True)
    paths, start = {}, 0
    for split, size in sizes.items():
        chunk = pairs[start : start + size]
        start += size
        paths[split] = tuple(
            os.path.join(os.fspath(directory), f"{split}.{suffix}")
            for suffix in ("src", "tgt")
        )
        for path, side in zip(paths[split], (0, 1), strict=True):
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.writelines(pair[side] + "\n" for pair in chunk)
    return paths
