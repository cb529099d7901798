"""Learning-rate schedules and the paper's Adam settings (Section 5.3).

Two schedules:
- `TransformerSchedule`, the paper's warm-up then inverse-square-root decay
  (`schedule="paper"`), which never anneals: it is made for runs of a
  hundred thousand updates.
- `WarmupLinearSchedule` (`schedule="auto"`, the default of the recipes): a
  linear warm-up to a peak, then a linear decay that reaches zero at the
  last planned update, so a run of any length ends annealed.  Linear decay
  to zero is what "Budgeted Training" (Li et al., ICLR 2020) found best
  when the number of updates is fixed in advance, and a time budget fixes it.

Vaswani et al. (2017) train with Adam (beta_1 = 0.9, beta_2 = 0.98,
epsilon = 1e-9) and a learning rate that grows linearly for `warmup_steps`
updates and then decays with the inverse square root of the step number:

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)

Example:

```python
from training.optimization.schedule import paper_optimizer

optimizer = paper_optimizer(hidden_dim=512)  # warmup_steps=4000 as in the paper
model.compile(optimizer=optimizer, loss=...)
```
"""

import keras
from keras import ops

PAPER_BETA_1 = 0.9
PAPER_BETA_2 = 0.98
PAPER_EPSILON = 1e-9


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then inverse-square-root decay (paper Section 5.3).

    `lr = scale * d_model^-0.5 * min(step_num^-0.5, step_num * warmup^-1.5)`,
    which peaks at `step_num == warmup_steps` with the value
    `scale * d_model^-0.5 * warmup_steps^-0.5` (about 7.0e-4 for the base
    model, d_model = 512 and 4000 warm-up steps).

    Step counting: a Keras optimizer calls its schedule with
    `optimizer.iterations`, the number of updates already applied (0 for the
    first update). This schedule evaluates the paper's formula at
    `step_num = step + 1`, so the k-th update uses exactly the paper's
    learning rate for step k (the paper counts from 1), step 0 is finite,
    and `schedule(warmup_steps - 1)` is the peak.

    Args:
        hidden_dim: int. The model width d_model.
        warmup_steps: int. Number of linear warm-up updates; 4000 in the paper.
        scale: float. Constant multiplier of the whole schedule (1.0 in the
            paper; other codebases expose it as `learning_rate`).
        name: str. Name of the schedule.

    Call arguments:
        step: integer or float scalar tensor, the optimizer's iteration count.

    Returns:
        A float32 scalar tensor, the learning rate for update `step + 1`.

    Example:

    ```python
    schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    optimizer = keras.optimizers.Adam(schedule, beta_2=0.98, epsilon=1e-9)
    ```

    References:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017, Section 5.3.
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0, name=None):
        super().__init__()
        if int(hidden_dim) != hidden_dim or hidden_dim < 1:
            raise ValueError(
                f"`hidden_dim` must be a positive integer. Received: "
                f"hidden_dim={hidden_dim}"
            )
        if int(warmup_steps) != warmup_steps or warmup_steps < 1:
            raise ValueError(
                f"`warmup_steps` must be a positive integer. Received: "
                f"warmup_steps={warmup_steps}"
            )
        if not scale > 0:
            raise ValueError(f"`scale` must be positive. Received: scale={scale}")
        self.hidden_dim = int(hidden_dim)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)
        self.name = name or "transformer_schedule"

    def __call__(self, step):
        # Keras passes the number of updates already applied; the paper's
        # step_num starts at 1 (see the class docstring).
        step_num = ops.cast(step, "float32") + 1.0
        decay = ops.rsqrt(step_num)
        warmup = step_num * float(self.warmup_steps) ** -1.5
        peak_factor = self.scale * float(self.hidden_dim) ** -0.5
        return peak_factor * ops.minimum(decay, warmup)

    def peak_learning_rate(self):
        """The largest learning rate, reached at update `warmup_steps`."""
        return self.scale * self.hidden_dim**-0.5 * self.warmup_steps**-0.5

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "name": self.name,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupLinearSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak_learning_rate`, then linear decay to zero.

    `lr(s) = peak * s / warmup` for `s <= warmup`, then
    `peak * (total - s) / (total - warmup)`, clipped at 0, with `s = step + 1`
    (the update about to be applied, counted from 1 like the paper's
    `step_num`).  The last planned update, `s = total`, uses a learning rate
    of 0: the run ends annealed whatever its length.

    The plan (`warmup_steps`, `total_steps`) is kept in two non-trainable
    float32 variables, so `set_plan` can fix it after training has started
    (a time-budgeted run measures its step time first) without tracing the
    train step again.

    Args:
        peak_learning_rate: float. The largest learning rate.
        warmup_steps: int. Updates of the linear warm-up (at least 1).
        total_steps: int. The planned number of updates (> warmup_steps).
        name: str. Name of the schedule.

    Example:

    ```python
    schedule = WarmupLinearSchedule(1e-3, warmup_steps=100, total_steps=2000)
    optimizer = keras.optimizers.AdamW(schedule, beta_2=0.98, epsilon=1e-9)
    ```
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, name=None):
        super().__init__()
        if not peak_learning_rate > 0:
            raise ValueError(
                "`peak_learning_rate` must be positive. Received: "
                f"peak_learning_rate={peak_learning_rate}"
            )
        self.peak_learning_rate = float(peak_learning_rate)
        self.name = name or "warmup_linear_schedule"
        self._warmup = keras.Variable(1.0, dtype="float32", trainable=False, name="warmup")
        self._total = keras.Variable(2.0, dtype="float32", trainable=False, name="total")
        self.set_plan(warmup_steps, total_steps)

    @property
    def warmup_steps(self):
        return int(keras.ops.convert_to_numpy(self._warmup))

    @property
    def total_steps(self):
        return int(keras.ops.convert_to_numpy(self._total))

    def set_plan(self, warmup_steps, total_steps):
        """Fix the warm-up length and the number of updates (ints)."""
        if int(warmup_steps) != warmup_steps or warmup_steps < 1:
            raise ValueError(
                "`warmup_steps` must be a positive integer. Received: "
                f"warmup_steps={warmup_steps}"
            )
        if int(total_steps) != total_steps or total_steps <= warmup_steps:
            raise ValueError(
                "`total_steps` must be an integer larger than warmup_steps="
                f"{warmup_steps}. Received: total_steps={total_steps}"
            )
        self._warmup.assign(float(warmup_steps))
        self._total.assign(float(total_steps))

    def __call__(self, step):
        step_num = ops.cast(step, "float32") + 1.0
        warmup = ops.convert_to_tensor(self._warmup)
        total = ops.convert_to_tensor(self._total)
        rising = step_num / warmup
        falling = (total - step_num) / (total - warmup)
        factor = ops.clip(ops.minimum(rising, falling), 0.0, 1.0)
        return self.peak_learning_rate * factor

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "name": self.name,
        }


def paper_optimizer(
    hidden_dim,
    warmup_steps=4000,
    scale=1.0,
    *,
    beta_1=PAPER_BETA_1,
    beta_2=PAPER_BETA_2,
    epsilon=PAPER_EPSILON,
    **kwargs,
):
    """Adam with the paper's hyperparameters and `TransformerSchedule`.

    Section 5.3: "We used the Adam optimizer with beta_1 = 0.9,
    beta_2 = 0.98 and epsilon = 10^-9", with the warm-up/decay schedule.

    Args:
        hidden_dim: int. The model width d_model.
        warmup_steps: int. Warm-up updates; 4000 in the paper.
        scale: float. Multiplier of the schedule.
        beta_1: float. Adam's first-moment decay.
        beta_2: float. Adam's second-moment decay.
        epsilon: float. Adam's epsilon.
        **kwargs: Passed to `keras.optimizers.Adam` (e.g. `global_clipnorm`).

    Returns:
        A `keras.optimizers.Adam` whose learning rate is a
        `TransformerSchedule`.
    """
    schedule = TransformerSchedule(hidden_dim, warmup_steps=warmup_steps, scale=scale)
    return keras.optimizers.Adam(
        learning_rate=schedule,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        **kwargs,
    )
