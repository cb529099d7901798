"""Which requests may share a batch without changing anyone's answer.

A signature answers a batch as a whole: the translator pads every source to
the batch's longest (S), decodes up to min(S + 50, `max_sequence_length`)
tokens, and its XLA programs pad further, to power-of-two buckets of rows
and of source length (`training.serving.signatures.pad_to_buckets`).  A
request batched with a longer one could thus be decoded further, or see
another padding, than it would alone.  So the server batches only requests
that the signature would treat alike, by a key:

| inputs | signature | key |
|---|---|---|
| numbers (ids, series, images) | any | the shape after the batch axis |
| sentences | a plain graph (`serving_default`, `translate_beam`, `classify`) | S, the longest source in word pieces (at least 1, at most `max_sequence_length`) |
| sentences | an XLA program (`*_xla`) | the source-length bucket of S and min(S + 50, `max_sequence_length`); S itself where a row is empty (such a batch keeps its own width) |

S is counted with the export's own tokenizer (`assets/`), in the worker
threads, for all the requests that arrive together in one call
(`PieceCounter`): the same pieces the graph cuts.  Without a tokenizer or a
`max_sequence_length` in `assets/config.json`, sentences are keyed by
exact S (or each request batched alone), never more loosely.  Rows of a
bucket are padded with copies of a real row, which finish when it does;
`tests/test_server_batching.py` checks that batched answers are the
unbatched ones.
"""

import asyncio
import itertools

import numpy as np

from training.serving.signatures import EXTRA_OUTPUT_LENGTH

#: The narrowest source bucket of the XLA programs (`pad_to_buckets`).
SMALLEST_SOURCE_BUCKET = 8
_ALONE = itertools.count()


def bucket(size, smallest=1, largest=None):
    """The power of two at or above `size`, at least `smallest`, at most
    `largest` or `size` if that is larger: `signatures.bucket_size` on ints."""
    size = max(size, smallest)
    power = 1 << (size - 1).bit_length()
    power = max(power, size)
    return power if largest is None else min(power, max(largest, size))


def is_xla(signature_name):
    """Whether the export compiled `signature_name` with XLA (`*_xla`)."""
    return signature_name.endswith("_xla")


class BatchKeys:
    """The batch key of each request to one export's signatures.

    Args:
        lengths: `lengths(sentences)`: the word pieces of each sentence (a
            numpy array of bytes, (B,)) as a numpy int array, by the
            export's tokenizer; None when the export has none.
        max_sequence_length: The model's, from the export's config; None
            when unknown.
    """

    def __init__(self, lengths=None, max_sequence_length=None):
        self.lengths = lengths
        self.max_sequence_length = max_sequence_length

    def sentences(self, inputs):
        """The sentences of a request whose word pieces its key needs, or None."""
        strings = [array for array in inputs.values() if array.dtype == object]
        if strings and self.lengths is not None and len(inputs) == 1:
            return strings[0]
        return None

    def key(self, signature_name, inputs, counts=None):
        """The key of a request: {input name: array} for `signature_name`.

        `counts`: the word pieces of `sentences(inputs)` if already counted
        (`PieceCounter`); counted here otherwise.
        """
        shapes = tuple((name, array.shape[1:]) for name, array in sorted(inputs.items()))
        if not any(array.dtype == object for array in inputs.values()):
            return shapes
        sentences = self.sentences(inputs)
        if sentences is None:
            return ("alone", next(_ALONE))  # no way to know what the graph pads to
        counts = np.asarray(self.lengths(sentences) if counts is None else counts)
        limit = self.max_sequence_length
        if limit is not None:
            counts = np.minimum(counts, limit)
        longest = max(int(counts.max()), 1)  # the graph keeps at least one column
        if not is_xla(signature_name):
            return shapes, longest
        if limit is None or (counts == 0).any():
            return shapes, "exact", longest, bool((counts == 0).any())
        return (shapes, "bucket", bucket(longest, SMALLEST_SOURCE_BUCKET, limit),
                min(longest + EXTRA_OUTPUT_LENGTH, limit))

    def warmup_widths(self):
        """The source widths whose XLA programs a bucket warm-up compiles."""
        limit = self.max_sequence_length or SMALLEST_SOURCE_BUCKET
        widths, width = [], SMALLEST_SOURCE_BUCKET
        while True:
            widths.append(bucket(min(width, limit), SMALLEST_SOURCE_BUCKET, limit))
            if width >= limit:
                return sorted(set(widths))
            width *= 2


def batch_sizes(largest):
    """1, 2, 4, ... up to the bucket of `largest`: the XLA programs' row buckets."""
    sizes, size = [], 1
    while size < largest:
        sizes.append(size)
        size *= 2
    return sizes + [bucket(largest)]


class PieceCounter:
    """Counts the word pieces of concurrent requests' sentences in one call.

    A call of the tokenizer costs about as much for one sentence as for a
    few dozen, so requests that arrive while a count runs are counted
    together in the next, in a worker thread (`executor`).

    Args:
        lengths: `BatchKeys.lengths`.
        executor: Where the counts run.
    """

    def __init__(self, lengths, executor):
        self.lengths = lengths
        self.executor = executor
        self._pending = []
        self._running = False

    async def count(self, sentences):
        """The word pieces of each of `sentences` (a numpy array of bytes)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((sentences, future))
        if not self._running:
            self._start()
        return await future

    def _start(self):
        batch, self._pending = self._pending, []
        self._running = True
        counting = asyncio.get_running_loop().run_in_executor(
            self.executor, self._count_all, [sentences for sentences, _ in batch])
        counting.add_done_callback(lambda done: self._done(batch, done))

    def _count_all(self, arrays):
        counts = np.asarray(self.lengths(np.concatenate(arrays)))
        bounds = np.cumsum([0] + [len(a) for a in arrays])
        return [counts[start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]

    def _done(self, batch, done):
        self._running = False
        try:
            results = done.result()
        except Exception as error:  # noqa: BLE001  (each request gets the error)
            results = [error] * len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)
        if self._pending:
            self._start()
