"""The plan of a run: what it trains for, as `plan.json` records it.

Every run has a plan: its learning-rate `Recipe` (`adaptive.resolve`), the
number of updates it makes, the depth of its model and whether it trains
with dropout.  A run of `epochs` passes knows all of it before its first
update; a time-budgeted run times a few updates first and revises the plan
after each epoch (`training.recipe.budget.Budget` does the arithmetic,
`training.loop.time_budget.TimeBudget` measures and applies), and records
what it measured (`Measured`), the task's typed evaluation plan among it.

Plans are frozen: a revision is a new plan.  On disk (`plan.json`) a plan
is one flat JSON object: each field of the recipe, the plan and what was
measured under its own name, beside the task's evaluation entries
(`test_beam`, ...); a field that does not apply (nothing measured, never
revised) is left out.  `Plan.from_json(plan.to_json(), kind)` gives the
same plan back, so a killed run resumes with the plan it made.  A plan.json
too old to hold the model's depth is refused with a one-line message.
"""

import dataclasses
import json
import math
import os

from training.data.atomic import atomic_write_json


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The learning-rate recipe of a run (`adaptive.resolve`).

    Attributes:
        schedule: "auto" or "paper", the schedule the recipe is for.
        peak_learning_rate: the schedule's peak.
        warmup_steps: updates of the linear warm-up.
        total_steps: the global step the run ends at (the schedule anneals
            to 0 there under "auto").
        weight_decay: AdamW's decoupled decay (0: Adam).
        batch_tokens: mean real tokens per training batch (what the peak's
            batch factor counts).
    """

    schedule: str
    peak_learning_rate: float
    warmup_steps: int
    total_steps: int
    weight_decay: float
    batch_tokens: float


@dataclasses.dataclass(frozen=True)
class EvaluationPlan:
    """What a task decided about its final evaluation while a budget timed it
    (`Task.time_evaluation`); a task with choices to record subclasses it
    (frozen, typed fields; a field that is None is not written)."""

    def to_json(self):
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, values):
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown entries {unknown} for a {cls.__name__} "
                             f"(its fields: {sorted(names)})")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class Measured:
    """What a budgeted run measured and reserved (seconds), and its revisions.

    Attributes:
        seconds_per_step: one update, checkpoint saves included.
        seconds_compiling_later: compiles of input shapes not met while
            timing (XLA), counted in the final reserve.
        seconds_per_validation: what ends an epoch (validation, score,
            saves).
        seconds_reserved_for_final: model selection, test evaluation and
            saving.
        planned_at_second: seconds since the command started when the plan
            was made.
        evaluation: the task's `EvaluationPlan`, which its `evaluate`
            receives (on resume too).
        revisions: how many times `total_steps` was revised after an epoch.
        preset_depth_passes: the passes the preset's depth would make,
            estimated while a shallower model was timed (None: none was).
        dropout_off_from_step: the update after which a revision turned
            dropout off (None: no revision did).
    """

    seconds_per_step: float
    seconds_compiling_later: float
    seconds_per_validation: float
    seconds_reserved_for_final: float
    planned_at_second: float
    evaluation: EvaluationPlan
    revisions: int = 0
    preset_depth_passes: float | None = None
    dropout_off_from_step: int | None = None


@dataclasses.dataclass(frozen=True)
class Plan:
    """A run's plan.

    Attributes:
        recipe: the learning-rate `Recipe`; its `total_steps` is the run's.
        num_layers: the depth of the model the run trains (each side).
        dropout_off: whether the run trains without dropout (it is short:
            fewer than `dropout_min_epochs` passes), from the start or from
            `measured.dropout_off_from_step`.
        planned: whether `total_steps` is final (a budgeted run's is not
            until it has timed its first updates).
        measured: what a budgeted run measured (None: a run of `epochs`
            passes, which measures nothing).
    """

    recipe: Recipe
    num_layers: int
    dropout_off: bool
    planned: bool = True
    measured: Measured | None = None

    @property
    def total_steps(self):
        return self.recipe.total_steps

    @property
    def evaluation(self):
        """The task's evaluation plan, or None where nothing was timed."""
        return None if self.measured is None else self.measured.evaluation

    def dropout_off_at(self):
        """The global step from which the run trains without dropout (0:
        from the start), or None when it trains with dropout."""
        if not self.dropout_off:
            return None
        measured = self.measured
        return 0 if measured is None or measured.dropout_off_from_step is None else (
            measured.dropout_off_from_step)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def with_measured(self, **changes):
        """The plan with `changes` to what was measured."""
        return self.replace(measured=dataclasses.replace(self.measured, **changes))

    def to_json(self):
        """The plan as `plan.json` holds it: one flat object."""
        out = dataclasses.asdict(self.recipe)
        out.update(planned=self.planned, dropout_off=self.dropout_off,
                   num_layers=self.num_layers)
        if self.measured is not None:
            measured = {f.name: getattr(self.measured, f.name)
                        for f in dataclasses.fields(Measured) if f.name != "evaluation"}
            out.update({k: v for k, v in measured.items() if v is not None})
            if not self.measured.revisions:
                del out["revisions"]
            out.update(self.measured.evaluation.to_json())
        return out

    @classmethod
    def from_json(cls, values, evaluation_type=EvaluationPlan):
        """The plan of a `plan.json` object; the keys that are not the plan's
        are the task's `evaluation_type` entries."""
        if not isinstance(values, dict):
            raise ValueError(f"a plan is a JSON object; received {values!r}")
        values = dict(values)
        if "num_layers" not in values:
            raise ValueError("it holds no `num_layers` (a plan written before runs recorded "
                             "their depth); train afresh in a new run directory")
        recipe = Recipe(**{name: values.pop(name) for name in _names(Recipe)})
        plan = {name: values.pop(name) for name in ("num_layers", "dropout_off", "planned")}
        measured = None
        if "seconds_per_step" in values:
            fields = {name: values.pop(name) for name in _names(Measured) if name in values}
            measured = Measured(**fields, evaluation=evaluation_type.from_json(values))
        elif values:
            raise ValueError(f"unknown entries {sorted(values)} in a plan that measured nothing")
        return cls(recipe, measured=measured, **plan)

    def write(self, path):
        write_plan(self, path)


@dataclasses.dataclass(frozen=True)
class DepthChoice:
    """What `plan.json` holds while a budgeted run goes from its short-run
    depth to the preset's: the depth alone, so that a kill from then on
    resumes at it (and plans afresh)."""

    num_layers: int

    def to_json(self):
        return {"planned": False, "num_layers": self.num_layers}

    def write(self, path):
        write_plan(self, path)


def _names(cls):
    return [field.name for field in dataclasses.fields(cls) if field.name != "evaluation"]


def write_plan(plan, path):
    """Writes `plan.json` at `path` whole or not at all (a kill or a power
    cut leaves the old file)."""
    atomic_write_json(path, plan.to_json())


def read_plan(path, evaluation_type=EvaluationPlan):
    """The `Plan` (or `DepthChoice`) written at `path`, or None where there is none.

    Raises ValueError, in one line naming the file, for one that is not a
    plan this code wrote.
    """
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        values = json.load(f)
    if isinstance(values, dict) and values.keys() == {"planned", "num_layers"}:
        return DepthChoice(int(values["num_layers"]))
    try:
        return Plan.from_json(values, evaluation_type)
    except (KeyError, TypeError, ValueError) as error:
        detail = f"it misses {error}" if isinstance(error, KeyError) else error
        raise ValueError(f"{path} is not a run's plan: {detail}.") from None


@dataclasses.dataclass(frozen=True)
class FinalEvaluation:
    """What a task's final evaluation (`Task.evaluate`) is given.

    Attributes:
        evaluation: the `EvaluationPlan` a budget timed (None: nothing was
            timed, the whole test runs).
        end_time: the `time.time()` by which the test must be done (a task
            leaves out an optional part that would not end by then, and says
            so in the metrics); infinite without a budget.
    """

    evaluation: EvaluationPlan | None = None
    end_time: float = math.inf
