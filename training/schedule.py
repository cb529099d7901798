"""The paper's learning-rate schedule and Adam settings (Section 5.3).

Vaswani et al. (2017) train with Adam (beta_1 = 0.9, beta_2 = 0.98,
epsilon = 1e-9) and a learning rate that grows linearly for `warmup_steps`
updates and then decays with the inverse square root of the step number:

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)

Example:

```python
from training.schedule import paper_optimizer

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
