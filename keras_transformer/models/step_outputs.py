"""What a model's training call computes for the loss beyond its output.

A model's `call` returns one thing in training and at inference: its
answer, `(B, K)` for a classifier.  Some losses need more of the same
forward pass: each member's logits for an ensemble whose members train on
their own losses, the mixing weights of a mixup batch.  Keras gives
`compute_loss` the call's output only, so the call keeps what the loss
needs here and `compute_loss` of the same step takes it, in the same trace
(a TensorFlow graph, or the JAX trainer's traced step): as Keras itself
keeps the losses a call adds.  The store is per thread, as
`tf.distribute`'s replicas trace their steps on threads of their own.
"""

import threading


class StepOutputs(threading.local):
    """The training extras of the latest call on this thread, taken once."""

    def __init__(self):
        super().__init__()
        self.values = None

    def keep(self, values):
        """Keeps `values` (a tuple of tensors) for `take`."""
        self.values = values

    def take(self):
        """The values kept by this thread's latest training call, or None;
        cleared, so that a later step never reads a former one's."""
        values, self.values = self.values, None
        return values
