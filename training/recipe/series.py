"""The time-series recipe's data rules: sizes from (N, T, K, F), not from a file's name.

A user with a UCR file pair gives only the paths; what the file shows (N
training series of T steps, K classes, F features) decides the sizes below.
The fixed parts of the recipe (the same for every file) are in the
`timeseries` preset (`training/configs/`) and
`SeriesClassification.recipe_defaults`; the evidence for each rule is the
experiment log's hold-out runs on ArrowHead, OSULeaf and ACSF1 ("The patch
recipe's rules, from hold-out runs", rows in
`benchmarks/results/explore_series.jsonl`) and the test figures on other
UCR sets in `benchmarks/results/series_recipe.json`.

Data rules (`series_recipe`):

- Updates, not epochs: U = max(4000, 100 passes).  Small files need many
  passes: 36 series in batches of 8 are 5 updates a pass, and the hold-out
  accuracy of ArrowHead and ACSF1 still rose between 2000 and 4000 updates.
- Batch B = N/4 rounded down to a power of two, kept in [8, 32] (and at most
  N): several updates per pass even for a few dozen series, and the noise of
  a small batch as a regulariser.
- The run is cut into `VALIDATIONS` = 20 "epochs" of ceil(U / 20) updates:
  an epoch is what `training.train` validates and checkpoints, and 800
  validations of a 36-series file would cost more than the updates.
- No series is truncated: `max_sequence_length` = T (the old preset's cap
  of 256 steps threw away 80% of every ACSF1 series).
- Patches of p = max(2, ceil(T / 32)) steps, a new one every s = ceil(p / 2)
  steps (PatchTST's overlap): 32 to 64 tokens whatever T is (T - 1 for T
  <= 64).  The old fixed p = 8 gave 183 tokens for T = 1460; p of half or
  twice the rule was no better on hold-out (ArrowHead, ACSF1).

- Files of at most `ENSEMBLE_MAX_SERIES` = 64 training series train an
  ensemble of `ENSEMBLE_SIZE` = 5 classifiers
  (`keras_transformer.models.ClassifierEnsemble`), each from its own
  initialisation and on its own loss, answering with their mean
  probabilities: InceptionTime's published accuracies are those of five
  networks.  Test accuracy, `benchmarks/bench_series_recipe.py`: ArrowHead
  (36 series) 0.829, 0.817, 0.817 for seeds 0-2, against 0.800, 0.800,
  0.811 for one model (1-NN: 0.800); GunPoint (50) 0.953 both ways;
  UnitTest (20, sktime's Chinatown excerpt) 0.909 both ways.  Below 64
  series the batch is 8 or 16, so five members cost about what one model
  costs on a file of 200 series (batch 32); on two cores a five-member
  ArrowHead run takes 213-234 s against ~95 s for one model.  Larger files,
  where one model varies less from seed to seed, keep one.

With the MiniRocket stem (`series_stem="random_kernels"`,
`series_stem_recipe`) the tokens are fixed features of windows, and the
encoder and head learn from them in far fewer updates: U = max(
`STEM_MIN_UPDATES` = 300, `STEM_PASSES` = 30 passes) in `STEM_VALIDATIONS`
= 1 epoch, no patches, the same batch rule, as many members as
`STEM_ENSEMBLE_WORK` allows (`stem_ensemble_size`, at most five, each
with its own stem biases), and
at most `STEM_MAX_POSITIONS` = 512 outputs per channel compared with the
biases (every 3rd of ACSF1's 1460 steps: 0.900 / 0.910 in ~48 CPU seconds
against 0.880 / 0.910 in ~79); the preset adds no mixup (the evidence:
docs/experiment-log.md, 2026-11-28).  The rule below was set when every
update recomputed the stem for its batch, each pass comparing every step
of every series with ~2000 biases, so that a member's cost was its stem
work, U x B x min(T, 512) series-steps; since 2026-11-29 each series'
tokens are computed once (`training.tasks.series_classification.FixedStems`)
and a member costs its updates (five members 20-31 s of training and test
on two idle cores, one model 6-8 s; once the members ran as one
computation, their own layers mapped over their stacked weights
(`keras_transformer.models.member_map`), and in one epoch, five took
8-15 s).  The members share a budget of 3.2 M series-steps,
five times ArrowHead's 0.60 M, and vote ArrowHead to 0.911
against one model's 0.897, GunPoint to 0.982 against 0.978 (seeds 0-2).
Where two members would exceed it (OSULeaf's 4.1 M a member, ACSF1's
2.5 M) one model trains; the short series of JapaneseVowels (0.28 M)
and ItalyPowerDemand (0.12 M) get five, 0.975 and 0.959 against one
model's 0.956 and 0.955.

Since the tokens are computed once, what a member costs is its updates'
samples, U x B series of 8 tokens each, whatever T: five members of
JapaneseVowels' 300 updates of 32 took 12-15 s of training and test.  The
members of an ensemble share `STEM_MEMBER_SAMPLES` = 16,000 samples, each
training min(U, ceil(16,000 / (k x B))) updates: it left ArrowHead,
GunPoint and BasicMotions (5 x 300 x 8 = 12,000) as they were (the cap
below came later), ItalyPowerDemand trains 200 updates of 16 and
JapaneseVowels 100 of 32.  Chosen by a rule written before the runs
(docs/experiment-log.md, "Members share their samples"): of 20,000, 16,000
and 12,000, the largest at which every seed of both sets trained and tested
in 9 s and each kept its accuracy within a point.  A member still makes at
least `STEM_MIN_MEMBER_PASSES` = 10 passes over the training series (none
of the benchmark's files reaches that floor; a larger file of short series
would).  Fewer members for about the same samples did worse on
JapaneseVowels: two members of 300 updates (19,200 samples) 0.970, five of
125 (20,000) 0.974.

A member of an ensemble trains at most `STEM_MEMBER_MAX_UPDATES` = 200
updates.  An update of five members costs about 10 ms however small its
batch, so ArrowHead, GunPoint and BasicMotions (5 x 300 x 8, inside the
shared samples) spent 4-6 s on updates.  With 200 they kept their mean
accuracy within a point (seeds 0-2: ArrowHead 0.907 against 0.914,
GunPoint 0.980 against 0.982, BasicMotions 1.000), and 150 lost 3.8 points
on ArrowHead (docs/experiment-log.md, "A member trains at most 200
updates").

Fields the config sets win; only the ones left at None (null) take these.
"""

import math

TARGET_PATCHES = 32  # non-overlapping patches per series; about x2 tokens with the half stride
MIN_UPDATES = 4000
MIN_PASSES = 100
MIN_BATCH, MAX_BATCH = 8, 32
VALIDATIONS = 20  # "epochs" of the run: validations and epoch checkpoints
ENSEMBLE_SIZE = 5
ENSEMBLE_MAX_SERIES = 64
STEM_MIN_UPDATES = 300
STEM_PASSES = 30
#: Epochs of a stem run: one validation, at its end.  The updates are the
#: same in any number of epochs (the stream, schedule and dropout follow the
#: global step), so more epochs only add validations and checkpoints (about
#: 0.4 s each).  The short-run rule counts passes, not epochs
#: (`training.recipe.budget.Budget.short`): one epoch of 300 updates is
#: 30 or more passes, and keeps its dropout.
STEM_VALIDATIONS = 1
#: Stem work, in series-steps (updates x batch x compared steps), the members
#: of a stem ensemble share: five of ArrowHead's 0.60 M each, and some room.
STEM_ENSEMBLE_WORK = 3_200_000
#: The stem compares at most this many outputs per channel with its biases (every
#: s-th of a longer series): the comparisons are most of a long series' cost.
STEM_MAX_POSITIONS = 512
#: Training samples (updates x batch) the members of a stem ensemble share:
#: a member trains min(U, ceil(this / (k x B))) updates.  Their tokens are
#: computed once, so a member costs its updates' samples (8 tokens each,
#: whatever T): five of ArrowHead's 300 x 8 fit, and JapaneseVowels' five
#: members train 100 updates of 32 where they trained 300.
STEM_MEMBER_SAMPLES = 16_000
#: The fewest passes over the training series a member of a stem ensemble
#: makes, whatever `STEM_MEMBER_SAMPLES` allows: JapaneseVowels' 100 updates
#: of 32 (11.9 passes) kept its accuracy within a point, 75 (8.9 passes)
#: lost 1.4.  No benchmarked file reaches it; a larger file of short series
#: would (1,000 of 24 steps: 4 members of 313 updates, not 125).
STEM_MIN_MEMBER_PASSES = 10
#: The most updates a member of a stem ensemble trains, whatever
#: `STEM_MEMBER_SAMPLES` allows: five members of 200 updates of 8 kept
#: ArrowHead's, GunPoint's and BasicMotions' accuracy within a point of 300,
#: in two thirds of the updates.  ItalyPowerDemand (5 x 200) and JapaneseVowels
#: (5 x 100) are unchanged.
STEM_MEMBER_MAX_UPDATES = 200


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
    return value


def series_batch_size(num_train):
    """N/4 rounded down to a power of two, in [8, 32] (and at most N)."""
    _positive_int("num_train", num_train)
    size = 2 ** max(0, math.floor(math.log2(max(num_train / 4, 1))))
    return min(num_train, max(MIN_BATCH, min(MAX_BATCH, size)))


def series_patches(series_length):
    """(p, s): patches of p = max(2, ceil(T / 32)) steps every s = ceil(p / 2) steps."""
    _positive_int("series_length", series_length)
    patch_length = max(2, math.ceil(series_length / TARGET_PATCHES))
    return patch_length, math.ceil(patch_length / 2)


def series_updates(num_train, batch_size):
    """U = max(4000, 100 passes of ceil(N / B) updates)."""
    _positive_int("num_train", num_train)
    _positive_int("batch_size", batch_size)
    return max(MIN_UPDATES, MIN_PASSES * math.ceil(num_train / batch_size))


def series_ensemble_size(num_train):
    """5 classifiers for at most 64 training series, else 1."""
    _positive_int("num_train", num_train)
    return ENSEMBLE_SIZE if num_train <= ENSEMBLE_MAX_SERIES else 1


def series_recipe(num_train, series_length, num_classes, num_features=1):
    """`TrainingConfig` fields for N training series of T steps, K classes, F features.

    Args:
        num_train: N, training series.
        series_length: T, time steps per series (the longest, if they differ).
        num_classes: K, distinct labels (2 or more).
        num_features: F, values per step (1 for the UCR archive).

    Returns:
        {"batch_size", "epochs", "steps_per_epoch", "max_sequence_length",
        "patch_length", "patch_stride", "ensemble_size"}: `epochs` x
        `steps_per_epoch` >= U.

    Raises:
        ValueError: a size that is not a positive integer, or K < 2.
    """
    for name, value in (("num_train", num_train), ("series_length", series_length),
                        ("num_classes", num_classes), ("num_features", num_features)):
        _positive_int(name, value)
    if num_classes < 2:
        raise ValueError(f"`num_classes` must be at least 2; received num_classes={num_classes!r}.")
    batch_size = series_batch_size(num_train)
    updates = series_updates(num_train, batch_size)
    patch_length, patch_stride = series_patches(series_length)
    return {
        "batch_size": batch_size,
        "epochs": VALIDATIONS,
        "steps_per_epoch": math.ceil(updates / VALIDATIONS),
        "max_sequence_length": series_length,
        "patch_length": patch_length,
        "patch_stride": patch_stride,
        "ensemble_size": series_ensemble_size(num_train),
    }


def series_stem_recipe(num_train, series_length, num_classes, num_features=1):
    """`series_recipe` for the MiniRocket stem: U = max(300, 30 passes) in one
    epoch, `stem_ensemble_size` members, no patches.  A member of an
    ensemble trains U = min(U, `STEM_MEMBER_MAX_UPDATES` = 200, ceil(16,000
    / (k x B))) updates (the `STEM_MEMBER_SAMPLES` its members share), and
    at least `STEM_MIN_MEMBER_PASSES` = 10 passes, ceil(10 N / B).

    Args and returns as `series_recipe`; `patch_length` is 1 and
    `patch_stride` None (the stem makes one token a window).
    """
    recipe = series_recipe(num_train, series_length, num_classes, num_features)
    batch_size = recipe["batch_size"]
    updates = max(STEM_MIN_UPDATES, STEM_PASSES * math.ceil(num_train / batch_size))
    members = stem_ensemble_size(updates, batch_size, series_length)
    if members > 1:
        updates = max(min(updates, STEM_MEMBER_MAX_UPDATES,
                          math.ceil(STEM_MEMBER_SAMPLES / (members * batch_size))),
                      math.ceil(STEM_MIN_MEMBER_PASSES * num_train / batch_size))
    recipe.update(epochs=STEM_VALIDATIONS,
                  steps_per_epoch=math.ceil(updates / STEM_VALIDATIONS), patch_length=1,
                  patch_stride=None, ensemble_size=members)
    return recipe


def stem_ensemble_size(updates, batch_size, series_length):
    """k = min(5, max(1, floor(`STEM_ENSEMBLE_WORK` / w))) members, w = U x B x
    min(T, `STEM_MAX_POSITIONS`) series-steps of stem work a member."""
    for name, value in (("updates", updates), ("batch_size", batch_size),
                        ("series_length", series_length)):
        _positive_int(name, value)
    work = updates * batch_size * min(series_length, STEM_MAX_POSITIONS)
    return min(ENSEMBLE_SIZE, max(1, STEM_ENSEMBLE_WORK // work))
