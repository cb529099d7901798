"""Training-recipe defaults that adapt to the model, the data and the budget.

The paper's recipe (Section 5.3) was made for 4.5M sentence pairs, batches
of 25,000 tokens and 100,000 updates.  A user with 30,000 pairs, a few
dozen series or ten minutes of CPU gets a run of a few hundred to a few
thousand updates, where its inverse-square-root decay never anneals and its
peak (which grows as the warm-up shrinks) stalls post-LN models.  The
defaults here are what small-data recipes that work do (fairseq's IWSLT
de-en, Transformer-Tiny, "Budgeted Training"), as functions of what the
run knows:

- the peak learning rate falls as 1/sqrt(d_model) (1e-3 at d_model 256,
  7.1e-4 at 512, the paper's base-model peak) and, where the loss sums
  over tokens (translation), as sqrt(batch) below a 1,024-token batch (the
  noise of a small batch wants a smaller step);
- the warm-up is a tenth of the planned updates, at least
  min(100, a quarter of them) and at most the paper's 4,000;
- the decay is linear to zero at the last planned update
  (`WarmupLinearSchedule`), so every run ends annealed;
- AdamW's decoupled weight decay: 1e-4 for translation (fairseq's IWSLT
  recipe), 0.01 for classification, where the data are smaller.

`config` fields left at None take these values; anything a preset or
`--set` gives wins.  `resolve` returns the values used, which the run
records in `plan.json`.
"""

import math

from training.recipe.plan import Recipe

REFERENCE_WIDTH = 256
REFERENCE_PEAK = 1e-3
# Batches below this many tokens lower the peak by sqrt(batch / reference).
# Multi30k de->en, 10-minute budget, ~890-token batches, no dropout: a peak
# of 1e-3 reached test BLEU 25.4 greedy (validation perplexity 16.1) where
# 4.7e-4 (the old 4,096-token reference) reached 22.2 (perplexity 22.2).
REFERENCE_BATCH_TOKENS = 1024
PAPER_WARMUP = 4000
WARMUP_SHARE = 0.1
WARMUP_FLOOR = 100


def peak_learning_rate(hidden_dim, batch_tokens=None):
    """1e-3 at d_model 256 and 1,024-token batches; 1/sqrt(width), sqrt(batch) below.

    Args:
        hidden_dim: d_model.
        batch_tokens: real tokens per batch (target tokens for
            translation), or None for no batch factor (text classification,
            whose loss is one term per sentence: `Task.peak_scales_with_batch_tokens`).

    Returns:
        The peak learning rate of the "auto" schedule.
    """
    if hidden_dim < 1 or (batch_tokens is not None and batch_tokens <= 0):
        raise ValueError(
            f"peak_learning_rate needs hidden_dim >= 1 and batch_tokens > 0; received "
            f"hidden_dim={hidden_dim!r}, batch_tokens={batch_tokens!r}."
        )
    width = math.sqrt(REFERENCE_WIDTH / hidden_dim)
    if batch_tokens is None:
        return REFERENCE_PEAK * width
    batch = min(1.0, math.sqrt(batch_tokens / REFERENCE_BATCH_TOKENS))
    return REFERENCE_PEAK * width * batch


def paper_peak_learning_rate(hidden_dim, warmup):
    """The "paper" schedule's peak, reached at update `warmup`: d_model^-0.5 * warmup^-0.5."""
    return int(hidden_dim) ** -0.5 * int(warmup) ** -0.5


def warmup_steps(total_steps, share=WARMUP_SHARE):
    """A tenth of the run, at least min(100, total / 4), at most 4,000."""
    if total_steps < 2:
        raise ValueError(f"total_steps must be >= 2; received total_steps={total_steps!r}.")
    floor = min(WARMUP_FLOOR, total_steps // 4)
    return int(max(1, min(PAPER_WARMUP, max(round(share * total_steps), floor))))


def resolve(config, task, hidden_dim, batch_tokens, total_steps):
    """The schedule and optimizer values a run uses: its `Recipe`.

    `task` (a `training.tasks.Task`) says whether the peak scales with the
    batch's tokens and gives its default weight decay.
    """
    if config.schedule == "paper":
        warmup = config.warmup_steps or PAPER_WARMUP
        peak = paper_peak_learning_rate(hidden_dim, warmup)
    else:
        warmup = config.warmup_steps or warmup_steps(total_steps)
        warmup = min(warmup, total_steps - 1)
        counted = batch_tokens if task.peak_scales_with_batch_tokens else None
        peak = config.learning_rate or peak_learning_rate(hidden_dim, counted)
    weight_decay = config.weight_decay
    if weight_decay is None:
        weight_decay = 0.0 if config.schedule == "paper" else task.recipe_defaults()["weight_decay"]
    return Recipe(
        schedule=config.schedule,
        peak_learning_rate=float(peak),
        warmup_steps=int(warmup),
        total_steps=int(total_steps),
        weight_decay=float(weight_decay),
        batch_tokens=float(batch_tokens),
    )
