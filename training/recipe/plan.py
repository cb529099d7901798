"""The plan of a run: what it trains for, as `plan.json` records it.

Every run has a plan: its learning-rate recipe (`adaptive.resolve`), the
number of updates it makes, the depth of its model and whether it trains
with dropout.  A run of `epochs` passes knows all of it before its first
update; a time-budgeted run times a few updates first
(`training.loop.time_budget.TimeBudget.calibrate`) and revises the plan after each epoch.

`Plan` is that record.  On disk (`plan.json`) it is a flat JSON object:
each field under its own name, a field that is None left out (it was
never set), and the entries a task records while timing its evaluation
(`Task.time_evaluation`: `test_beam`, `seconds_decoding_trace`, ...) beside
them.  `Plan.from_json(plan.to_json())` gives the same plan back, and
`to_json()` of a plan read from an earlier run's file gives that file's
object, so a killed run resumes with the plan it made.
"""

import dataclasses
import json
import os


@dataclasses.dataclass
class Plan:
    """A run's plan; a field left None is not set (and not written).

    The recipe (from `adaptive.resolve`; absent from a plan that so far
    records only a depth, see `has_recipe`):

    Attributes:
        schedule: "auto" or "paper", the schedule the recipe is for.
        peak_learning_rate: the schedule's peak.
        warmup_steps: updates of the linear warm-up.
        total_steps: the global step the run ends at (the schedule
            anneals to 0 there under "auto").
        weight_decay: AdamW's decoupled decay (0: Adam).
        batch_tokens: mean real tokens per training batch (what the peak's
            batch factor counts).

    The state of the plan:

    Attributes:
        planned: whether `total_steps` is final (a budgeted run's is not
            until it has timed its first updates).
        task_entries: what the task recorded in the plan while timing its
            evaluation (for instance whether the test runs a beam search);
            its `evaluate` receives them.  Written beside the fields.
        dropout_off: whether the run trains without dropout (it is short:
            fewer than `dropout_min_epochs` passes).
        num_layers: the depth of the model the run trains (each side).
        dropout_off_from_step: the update after which a revision turned
            dropout off (absent: from the start, when `dropout_off`).
        revisions: how many times a budgeted run's `total_steps` was
            revised after an epoch (absent: never).

    What a budgeted run measured and reserved (seconds):

    Attributes:
        seconds_per_step: one update, checkpoint saves included.
        seconds_compiling_later: compiles of input shapes not met while
            timing (XLA), counted in the final reserve.
        seconds_per_validation: what ends an epoch (validation, score,
            saves).
        seconds_reserved_for_final: model selection, test evaluation and
            saving.
        planned_at_second: seconds since the command started when the
            plan was made.
        preset_depth_passes: the passes the preset's depth would make,
            estimated while a shallower model was timed.
    """

    schedule: str | None = None
    peak_learning_rate: float | None = None
    warmup_steps: int | None = None
    total_steps: int | None = None
    weight_decay: float | None = None
    batch_tokens: float | None = None
    planned: bool | None = None
    task_entries: dict = dataclasses.field(default_factory=dict)
    dropout_off: bool | None = None
    seconds_per_step: float | None = None
    seconds_compiling_later: float | None = None
    seconds_per_validation: float | None = None
    seconds_reserved_for_final: float | None = None
    planned_at_second: float | None = None
    preset_depth_passes: float | None = None
    num_layers: int | None = None
    dropout_off_from_step: int | None = None
    revisions: int | None = None

    def has_recipe(self):
        """Whether the learning-rate recipe is set (not only a depth)."""
        return self.schedule is not None

    def recipe(self):
        """The recipe's values, as `adaptive.build_schedule` reads them."""
        return {name: getattr(self, name) for name in _RECIPE}

    def to_json(self):
        """The plan as `plan.json` holds it: a flat dict of what is set."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "task_entries":
                out.update(value)
            elif value is not None:
                out[field.name] = value
        return out

    @classmethod
    def from_json(cls, values):
        """The plan of a `plan.json` object; keys not a field are the task's entries."""
        if not isinstance(values, dict):
            raise ValueError(f"A plan must be a JSON object; received {values!r}.")
        names = {field.name for field in dataclasses.fields(cls)} - {"task_entries"}
        fields = {k: v for k, v in values.items() if k in names}
        entries = {k: v for k, v in values.items() if k not in names}
        return cls(**fields, task_entries=entries)

    def write(self, path):
        """Writes `plan.json` at `path` atomically (a kill leaves the old file)."""
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path):
        """The plan written at `path`, or None where there is none."""
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
        try:
            return cls.from_json(values)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path} is not a run's plan: {error}") from None


_RECIPE = ("schedule", "peak_learning_rate", "warmup_steps", "total_steps",
           "weight_decay", "batch_tokens")
