"""The resolved configuration of a training run, and its named presets.

One frozen dataclass, a comment on every field; JSON files under
`training/configs/` name presets (model size x dataset), and `--set key=value`
overrides any field from the command line.  The resolved config is written
as `config.json` in the run directory.
"""

import dataclasses
import json
import math
import os
import pathlib

CONFIG_DIR = pathlib.Path(__file__).parent / "configs"
# The trained tasks (`training.tasks.TASKS` holds them; kept here as a light
# list so that --help and validation need not import TensorFlow).
TASKS = ("translation", "classification", "timeseries")
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
SCHEDULES = ("auto", "paper")
SELECTIONS = ("auto", "last", "average_last", "average_best")
POOLINGS = ("mean", "max")
# Sizes a task may derive from its data when the config leaves them null
# (steps_per_epoch and patch_stride are null by default: one pass, no overlap).
DATA_FIELDS = ("batch_size", "epochs", "steps_per_epoch", "max_sequence_length",
               "patch_length", "patch_stride", "ensemble_size")
DATASETS = ("toy", "multi30k", "sst2", "trec", "ucr", "files")
# The allowed values of every enumerated field (validate() and --help).
CHOICES = {
    "task": TASKS, "dataset": DATASETS, "strategy": STRATEGIES,
    "precision": PRECISIONS, "schedule": SCHEDULES, "selection": SELECTIONS,
    "pooling": POOLINGS,
}


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    # "translation", "classification" (text) or "timeseries" (numeric).
    task: str = "translation"
    # "toy" (generated number words), "multi30k", "sst2", "ucr", or "files".
    dataset: str = "toy"
    # Folder of the real corpora; relative paths are taken from the repo root.
    data_dir: str = "../shared/data"
    # Multi30k language pair (source -> target).
    source_language: str = "de"
    target_language: str = "en"
    # dataset="files": explicit paths (parallel .src/.tgt, or label<TAB>text / UCR);
    # a path alone is one file.  Without valid_files, text holds out one pair in
    # 50 (translation) or one sentence in 10 (classification) to validate.
    train_files: tuple = ()
    valid_files: tuple = ()
    test_files: tuple = ()
    # Text encoding of the input files ("utf-8"; "latin-1" for old corpora).
    encoding: str = "utf-8"
    # Toy corpus sizes (dataset="toy").
    toy_train_size: int = 20000
    toy_eval_size: int = 500
    # Model preset of keras_transformer.models.PRESETS and field overrides.
    model_preset: str = "tiny"
    model_overrides: dict = dataclasses.field(default_factory=dict)
    # Word-piece vocabulary learned from the training split (shared src/tgt).
    vocabulary_size: int = 8000
    lower_case: bool = True
    # Longest sequence in pieces; longer inputs are truncated with a warning.
    max_sequence_length: int | None = 64
    # Translation batches hold about this many tokens (Section 5.1: 25,000).
    tokens_per_batch: int = 2048
    # Classification batch size, in examples.  A task that derives sizes from
    # its data (`Task.data_fields`: time series) fills the ones set to null
    # here and below (batch_size, epochs, steps_per_epoch,
    # max_sequence_length, patch_length, patch_stride) from the data.
    batch_size: int | None = 32
    # Passes over the training data, and optional cap on steps per epoch.
    epochs: int | None = 10
    steps_per_epoch: int | None = None
    # Learning-rate schedule: "auto" (linear warm-up, then linear decay to 0
    # at the last planned update: every run ends annealed) or "paper"
    # (Section 5.3: warm-up, then inverse square root; never anneals).
    schedule: str = "auto"
    # Peak learning rate of the "auto" schedule; None: from the model width
    # and the batch (training/recipe/adaptive.py).
    learning_rate: float | None = None
    # Warm-up updates; None: 4000 for "paper", and for "auto" a tenth of the
    # planned updates, at least min(100, a quarter of them), at most 4000.
    warmup_steps: int | None = None
    # Multiplier of the "paper" schedule.
    learning_rate_scale: float = 1.0
    # AdamW decoupled weight decay; None: 1e-4 for translation (fairseq's
    # IWSLT recipe), 0.01 for classification.
    weight_decay: float | None = None
    # A run planned for fewer passes over the training data than this trains
    # without dropout (0: always keep the model's dropout). A model that sees
    # each example once or twice cannot memorise it; dropout only slows it
    # (Multi30k, 10 minutes: validation BLEU 22.2 without, 12.1 with, and
    # 15% slower updates). Recorded in plan.json ("dropout_off"). A budgeted
    # run whose plan, revised at an epoch's end from the measured pace,
    # turns short trains without dropout from there ("dropout_off_from_step").
    dropout_min_epochs: float = 3.0
    # A short run (planned for fewer than `dropout_min_epochs` passes) builds
    # its model with this many layers (each side) instead of the preset's;
    # null: the preset's depth at any length. Under a time budget the
    # shallower model is timed and planned first, and the preset's depth is
    # built (and planned afresh) only when it would itself make
    # `dropout_min_epochs` passes, its cost per update estimated from the
    # shallower model's (plan.json: "preset_depth_passes"). Bound by
    # compute, a shallower model makes more updates and learns more per
    # minute: Multi30k de->en in 10 minutes reached 31.4 greedy BLEU with
    # 2+2 layers, 28.1-28.6 with 3+3. The depth used is recorded in
    # plan.json ("num_layers").
    short_run_num_layers: int | None = None
    # Wall-clock minutes for the whole command (vocabulary, data, training,
    # validation, checkpoints, test evaluation); None: no budget, train for
    # `epochs`. The number of updates is planned from the measured step time
    # (recorded in plan.json, so a resumed run follows the same plan).
    time_budget_minutes: float | None = None
    # Section 5.4: label smoothing epsilon_ls.
    label_smoothing: float = 0.1
    # Distribution: default, one_device, mirrored (local GPUs or logical
    # CPUs) or multi_worker (TF_CONFIG).
    strategy: str = "default"
    # "float32", "mixed_bfloat16", or "mixed_float16" (with loss scaling).
    precision: str = "float32"
    # Compile the train step with XLA.
    jit_compile: bool = False
    # Seeds every RNG; `deterministic` also turns on TF op determinism.
    seed: int = 0
    deterministic: bool = False
    # Save a resumable checkpoint every this many steps (atomic, survives kill).
    checkpoint_every_steps: int = 200
    # TensorBoard gets the training loss and learning rate every this many
    # updates (step/* scalars), besides the per-epoch curves.
    log_every_steps: int = 25
    # Keep the weights of the last k and of the best k epochs (by validation).
    keep_epoch_checkpoints: int = 5
    # Final weights: "auto" picks whichever of the last weights, the average
    # of the last k and the average of the best k validates best; "last",
    # "average_last", "average_best" force one. average_last > 1 is the
    # older spelling of "average_last" with k = average_last.
    selection: str = "auto"
    average_last: int = 0
    # Stop when the validation score has not improved for this many epochs
    # (0: never stop early).
    early_stopping_patience: int = 5
    # Evaluation: sentences decoded per epoch for validation BLEU (0: none),
    # the beam of the final test evaluation (Section 6.1: 4, alpha 0.6).
    eval_sentences: int = 200
    beam_size: int = 4
    length_penalty: float = 0.6
    # Example translations printed at the end.
    num_examples: int = 5
    # Classification: number of classes (inferred from data when 0); text
    # takes 1 for one sigmoid output over two classes.
    num_classes: int = 0
    # Time series: steps per token (PatchTST patches); 1 is one token per step.
    patch_length: int | None = 1
    # Time series: steps between patch starts (< patch_length: overlapping
    # patches); None: half a patch when the recipe fills it, else no overlap.
    patch_stride: int | None = None
    # Time series: each series to mean 0, std 1 over time, per feature, in the model.
    standardize_series: bool = False
    # Classification: mixup with lam ~ Beta(alpha, alpha) (0: none). Series
    # are mixed as they are, on every training batch; sentences, whose tokens
    # cannot be mixed, by their pooled features (`TransformerClassifier`).
    mixup_alpha: float = 0.0
    # Classification: k > 1 trains k independently initialised classifiers
    # side by side, each on its own loss, and answers with their mean
    # probabilities (keras_transformer.models.ClassifierEnsemble); k times
    # the compute of one. 1: one classifier.
    ensemble_size: int | None = 1
    # Text classification: widths of n-gram convolutions before the encoder
    # (keras_transformer.layers.NGramConvolution, e.g. [3, 4, 5]); []: none.
    ngram_widths: tuple = ()
    # Text classification: "mean" or "max" of the encoder output over tokens.
    pooling: str = "mean"
    # Text classification: n > 0 learns a vocabulary of whole words seen at
    # least n times in the training text (up to vocabulary_size, the most
    # frequent first), every other word one [UNK] (Kim 2014); 0: word pieces.
    min_word_count: int = 0
    # Text classification, ensemble of k: true pools the training sentences
    # and those of a validation file, if any, trains member i on all but
    # fold i (sentence j is in fold j mod 10) and validates it there, so the
    # ensemble learns from every labelled sentence and selects by each
    # member's accuracy on its own fold; false validates all members on the
    # validation file, or without one holds out every 10th sentence.
    cross_fit: bool = False
    # Text classification: each word also carries its spelling, the hashed
    # ids of its character 3-5-grams, whose mean vector is added to its
    # embedding (`CharNGramTokenizer`, TransformerClassifier
    # `char_ngram_buckets`; fastText's sub-word vectors); the number of hash
    # buckets, 0: none.  The text presets use 16,384 (session 28).
    char_ngram_buckets: int = 0

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values):
        values = dict(values)
        _check_keys(values)
        for key in ("train_files", "valid_files", "test_files"):
            if isinstance(values.get(key), (str, os.PathLike)):
                # One path (`--set train_files=data.tsv`) is one file, not its characters.
                values[key] = (os.fspath(values[key]),)
            elif key in values:
                values[key] = tuple(values[key])
        if isinstance(values.get("ngram_widths"), (list, tuple)):
            values["ngram_widths"] = tuple(values["ngram_widths"])
        config = cls(**values)
        config.validate()
        return config

    def replace(self, **overrides):
        return self.from_dict({**self.to_dict(), **overrides})

    def validate(self):
        """Raise ValueError naming the field and the value, before any work."""
        for name, choices in CHOICES.items():
            _choice(name, getattr(self, name), choices)
        from_data = []  # null sizes: only a task that fills them from its data takes them
        for name in ("vocabulary_size", "max_sequence_length", "tokens_per_batch",
                     "batch_size", "epochs", "checkpoint_every_steps", "log_every_steps",
                     "patch_length", "ensemble_size"):
            value = getattr(self, name)
            if value is None and name in DATA_FIELDS:
                from_data.append(name)
            elif not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
        if self.patch_stride is not None and (
            not isinstance(self.patch_stride, int) or isinstance(self.patch_stride, bool)
            or self.patch_stride <= 0
        ):
            raise ValueError(
                f"`patch_stride` must be a positive integer or null; received "
                f"patch_stride={self.patch_stride!r}."
            )
        if (self.patch_stride is not None and self.patch_length is not None
                and self.patch_stride > self.patch_length):
            raise ValueError(
                f"`patch_stride` must not exceed `patch_length`; received patch_stride="
                f"{self.patch_stride!r}, patch_length={self.patch_length!r}."
            )
        for name in ("mixup_alpha",):
            value = getattr(self, name)
            if isinstance(value, bool) or not (
                isinstance(value, (int, float)) and 0 <= value < math.inf
            ):
                raise ValueError(
                    f"`{name}` must be a finite number >= 0; received {name}={value!r}."
                )
        if not isinstance(self.ngram_widths, tuple) or any(
            not isinstance(w, int) or isinstance(w, bool) or w <= 0 for w in self.ngram_widths
        ):
            raise ValueError(
                "`ngram_widths` must be a list of positive integers; received "
                f"ngram_widths={self.ngram_widths!r}."
            )
        for name in ("min_word_count", "char_ngram_buckets"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(
                    f"`{name}` must be a non-negative integer; received {name}={value!r}."
                )
        for name in ("standardize_series", "cross_fit"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"`{name}` must be true or false; received {name}={getattr(self, name)!r}."
                )
        if self.warmup_steps is not None and (
            not isinstance(self.warmup_steps, int) or self.warmup_steps <= 0
        ):
            raise ValueError(
                f"`warmup_steps` must be a positive integer or null; received {self.warmup_steps!r}."
            )
        for name in ("learning_rate", "time_budget_minutes"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"`{name}` must be a positive number or null; received {name}={value!r}.")
        if self.weight_decay is not None and not 0 <= self.weight_decay < 1:
            raise ValueError(f"`weight_decay` must be in [0, 1) or null; received {self.weight_decay!r}.")
        if self.short_run_num_layers is not None and (
            not isinstance(self.short_run_num_layers, int)
            or isinstance(self.short_run_num_layers, bool) or self.short_run_num_layers < 0
        ):
            raise ValueError(
                "`short_run_num_layers` must be a non-negative integer or null; received "
                f"short_run_num_layers={self.short_run_num_layers!r}."
            )
        if self.dropout_min_epochs < 0:
            raise ValueError(
                f"`dropout_min_epochs` must be >= 0; received {self.dropout_min_epochs!r}."
            )
        if self.early_stopping_patience < 0:
            raise ValueError(
                f"`early_stopping_patience` must be >= 0; received {self.early_stopping_patience!r}."
            )
        if self.steps_per_epoch is not None and self.steps_per_epoch <= 0:
            raise ValueError(f"`steps_per_epoch` must be positive; received {self.steps_per_epoch!r}.")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"`label_smoothing` must be in [0, 1); received {self.label_smoothing!r}.")
        if self.average_last > self.keep_epoch_checkpoints:
            raise ValueError(
                f"`average_last`={self.average_last} exceeds `keep_epoch_checkpoints`="
                f"{self.keep_epoch_checkpoints}: those checkpoints would be deleted."
            )
        if self.dataset == "files" and not self.train_files:
            raise ValueError("dataset='files' needs `train_files`; received train_files=().")
        # Last: the task's own checks import its module (and TensorFlow).
        from training.tasks import get_task

        task = get_task(self.task)
        for name in from_data:
            if name not in task.data_fields:
                raise ValueError(
                    f"`{name}` must be a positive integer; received {name}=None "
                    f"(task={self.task!r} does not derive it from the data)."
                )
        task.check_config(self)


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {list(choices)}; received {name}={value!r}.")


def _check_keys(values):
    known = {f.name for f in dataclasses.fields(TrainingConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"Unknown config key(s) {unknown}; valid keys are {sorted(known)}."
        )


def available_presets():
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def load_config(name_or_path="toy", overrides=()):
    """A preset name or JSON path, plus `key=value` overrides (JSON values)."""
    path = pathlib.Path(name_or_path)
    if not path.suffix:
        path = CONFIG_DIR / f"{name_or_path}.json"
        if not path.exists():
            raise ValueError(
                f"Unknown config preset {name_or_path!r}; presets: {available_presets()}."
            )
    elif not path.exists():
        raise FileNotFoundError(f"Config file not found: config={str(path)!r}.")
    values = json.loads(path.read_text(encoding="utf-8"))
    values.pop("_comment", None)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"Overrides are key=value; received {item!r}.")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw  # a bare string such as strategy=mirrored
        if key.startswith("model."):
            values.setdefault("model_overrides", {})[key[len("model."):]] = value
            continue
        _check_keys({key: None})
        values[key] = value
    return TrainingConfig.from_dict(values)
