"""TensorFlow's in-place writer of a search's key/value caches.

A decoding step writes one position into each self-attention cache.  In a
TensorFlow graph the functional write (`TensorScatterUpdate`) copied the
whole cache first on the CPU, in every graph tried, so each step's writes
grow with the cache (figures: docs/results.md).  A search traced inside
`graph_cache_writes()` copies its caches once (`DeepCopy`) and writes each
step's rows into those buffers (`InplaceUpdate`); see
`keras_transformer.layers.kv_cache.writes_in_place` for why that is safe.
XLA has no kernel for either op (and updates in place itself), so the
programs it compiles are traced without it.
"""

import tensorflow as tf

from keras_transformer.layers import kv_cache


class TensorFlowInPlace:
    """The writer `kv_cache.writes_in_place` takes, in TensorFlow's raw ops."""

    @staticmethod
    def copy(tensor):
        # DeepCopy is stateful: never merged with an equal copy (six zero
        # caches of one shape would otherwise share one buffer) nor folded.
        return tf.raw_ops.DeepCopy(x=tensor)

    @staticmethod
    def update_rows(cache, indices, values):
        # The reshapes share the cache's buffer, so the rows land in it;
        # reshaping back to `tf.shape(cache)` keeps the static dims.
        rows = tf.reshape(cache, (-1, cache.shape[-1]))  # (B * h * S, d)
        written = tf.raw_ops.InplaceUpdate(x=rows, i=indices, v=values)
        return tf.reshape(written, tf.shape(cache))


TENSORFLOW_IN_PLACE = TensorFlowInPlace()


def graph_cache_writes():
    """The context to trace a search in, in a graph that XLA does not compile."""
    return kv_cache.writes_in_place(TENSORFLOW_IN_PLACE)
