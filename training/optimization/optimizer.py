"""The schedule and optimizer of a run's recipe (`training.recipe.adaptive`)."""

from training.optimization.fused_adam import FusedAdam, FusedAdamW
from training.optimization.schedule import (
    PAPER_BETA_1,
    PAPER_BETA_2,
    PAPER_EPSILON,
    TransformerSchedule,
    WarmupLinearSchedule,
)


def build_schedule(config, hidden_dim, recipe):
    """The learning-rate schedule of `config.schedule` for `recipe` (a `Recipe`)."""
    if config.schedule == "paper":
        return TransformerSchedule(hidden_dim, recipe.warmup_steps)
    return WarmupLinearSchedule(
        recipe.peak_learning_rate, recipe.warmup_steps, recipe.total_steps
    )


def build_optimizer(schedule, weight_decay):
    """Adam with the paper's betas and epsilon; AdamW when `weight_decay`.

    AdamW's decay skips biases and LayerNorm scales and offsets.  Both are
    Keras' optimizers with one fused kernel a variable on TensorFlow
    (`fused_adam`): the same update to float rounding, a fraction of the ops.
    """
    common = dict(beta_1=PAPER_BETA_1, beta_2=PAPER_BETA_2, epsilon=PAPER_EPSILON)
    if not weight_decay:
        return FusedAdam(schedule, **common)
    optimizer = FusedAdamW(schedule, weight_decay=weight_decay, **common)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer
