"""Decoding strategies over the Transformer's key/value cache (Section 6.1).

`greedy_search` and `beam_search` (with the GNMT length penalty) take a model
exposing `encode`, `init_cache` and `decode_step`, run in one
`keras.ops.while_loop` with fixed shapes, and stop early once every sentence
has ended.
"""

from keras_transformer.decoding.beam_search import beam_search
from keras_transformer.decoding.greedy_search import greedy_search

__all__ = ["beam_search", "greedy_search"]
