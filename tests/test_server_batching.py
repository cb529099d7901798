"""A batch never changes a request's answer; the queue is bounded; deadlines hold.

Concurrent requests of varied lengths to each signature are batched by the
server (its metrics count fewer batches than requests) and each is
answered as one unbatched call of the signature answers it in this
process: translations, token ids and labels exactly, scores and
probabilities to float32 rounding.  The `Batcher`'s queueing rules are
checked on a signature that waits on a gate, so that what is queued, run,
refused or dropped is decided by the test, not by timing.
"""

import asyncio
import re
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from export.server.batch_keys import BatchKeys, PieceCounter, batch_sizes, bucket
from export.server.batcher import Batcher, BatchPolicy, BatchThreads
from export.server.errors import RequestError
from tests.export_fixtures import SENTENCES, tiny_tokenizer
from tests.server_fixtures import (
    assert_same_answer,
    client,
    expected,
    request_many,
    shared_server,
    texts,
)
from training.serving.signatures import bucket_size


def test_bucket_is_the_exports_bucket_size():
    for smallest, largest in ((1, None), (8, 24), (8, 64), (8, 100)):
        for size in range(0, 130):
            exported = bucket_size(tf.constant(size), smallest, largest).numpy()
            assert bucket(size, smallest, largest) == exported, (size, smallest, largest)
    assert batch_sizes(32) == [1, 2, 4, 8, 16, 32] and batch_sizes(5) == [1, 2, 4, 8]


def test_batch_keys_group_what_the_signature_treats_alike():
    keys = BatchKeys(lambda sentences: np.array([len(s.split()) for s in sentences]), 24)

    def key(signature, *sentences):
        return keys.key(signature, {"sentences": np.array(sentences, dtype=object)})

    # A plain graph pads to the longest source: only equal longest share.
    assert key("serving_default", b"a b", b"c d e") == key("serving_default", b"a b c")
    assert key("serving_default", b"a b") != key("serving_default", b"a b c")
    assert key("serving_default", b"") == key("serving_default", b"a")  # one column either way
    assert key("serving_default", b" ".join([b"w"] * 30)) == key(
        "serving_default", b" ".join([b"w"] * 24))  # cut at max_sequence_length
    # XLA: one bucket and one output limit min(S + 50, 24) = 24 for every S.
    assert key("translate_xla", b"a") == key("translate_xla", b"a b c d e")
    assert key("translate_xla", b"a") != key("translate_xla", b" ".join([b"w"] * 9))
    assert key("translate_xla", b"", b"a") != key("translate_xla", b"a")  # keeps its width
    ids = {"encoder_token_ids": np.zeros((2, 5), np.int32)}
    assert keys.key("translate_ids", ids) == keys.key(
        "translate_ids", {"encoder_token_ids": np.ones((1, 5), np.int32)})
    assert keys.key("translate_ids", ids) != keys.key(
        "translate_ids", {"encoder_token_ids": np.ones((1, 6), np.int32)})
    unknown = BatchKeys()  # no tokenizer: every request of sentences alone
    assert unknown.key("serving_default", {"sentences": np.array([b"a"], object)}) != \
        unknown.key("serving_default", {"sentences": np.array([b"a"], object)})


def test_word_pieces_of_concurrent_requests_are_counted_in_one_call():
    import concurrent.futures

    calls = []

    def lengths(sentences):
        calls.append(len(sentences))
        return np.array([len(s.split()) for s in sentences])

    executor = concurrent.futures.ThreadPoolExecutor(1)
    counter = PieceCounter(lengths, executor)
    requests = [np.array([b"a b", b"c"], object), np.array([b"d e f"], object),
                np.array([b""], object), np.array([b"g h i j"], object)]

    async def main():
        return await asyncio.gather(*(counter.count(r) for r in requests))

    counts = asyncio.run(main())
    executor.shutdown()
    assert [c.tolist() for c in counts] == [[2, 1], [3], [0], [4]]
    assert calls == [2, 3]  # the first alone, the three that came meanwhile together


def _batch_counts(server, model, signature):
    with client(server) as http:
        text = http.get("/monitoring/prometheus/metrics").text
    counts = {}
    for what in ("count", "sum"):
        match = re.search(rf"^:tensorflow:serving:batching_session:processed_batch_size_{what}"
                          rf'\{{model_name="{model}",signature_name="{signature}"\}} (\S+)$',
                          text, flags=re.M)
        counts[what] = float(match.group(1)) if match else 0.0
    return counts


# Sources of many lengths: 1-7 words, longer than max_sequence_length (24
# pieces), empty and blank; requests of one and of two sentences.  The XLA
# signatures get those of one source bucket (8 pieces at most), and an
# empty one: each new bucket is a compilation, here and in the reference.
_LONG = " ".join(SENTENCES[:8])
_SOURCES = SENTENCES[:30] + [_LONG, "", "   ", SENTENCES[0]]


def _xla_sources():
    pieces = tiny_tokenizer().tokenize(tf.constant(SENTENCES)).row_lengths().numpy()
    short = [s for s, n in zip(SENTENCES, pieces, strict=True) if n <= 8][:16]
    return short + ["", short[0]]


def _requests(sources):
    singles = [[s] for s in sources]
    pairs = [[sources[i], sources[i + 1]] for i in range(0, 12, 2)]
    return singles + pairs


@pytest.mark.parametrize("model, signature", [
    ("translator", "serving_default"), ("translator", "translate_xla"),
    ("translator", "translate_beam"), ("translator", "translate_beam_xla"),
    ("classifier", "serving_default")])
def test_concurrent_requests_are_batched_and_answered_as_alone(model, signature):
    server = shared_server()
    requests = _requests(_xla_sources() if signature.endswith("_xla") else _SOURCES)
    before = _batch_counts(server, model, signature)
    answers = request_many(server.url, [
        ("POST", f"/v1/models/{model}:predict",
         {"signature_name": signature, "instances": sentences}) for sentences in requests],
        clients=16)
    after = _batch_counts(server, model, signature)
    for sentences, (status, answer, _) in zip(requests, answers, strict=True):
        assert status == 200, answer
        assert_same_answer(answer, expected(model, signature, {"sentences": texts(sentences)}))
    batches = after["count"] - before["count"]
    rows = after["sum"] - before["sum"]
    assert rows == sum(len(r) for r in requests)
    assert batches < len(requests), f"{len(requests)} requests ran as {batches} batches"


def test_token_id_requests_are_batched_by_shape():
    server = shared_server()
    rng = np.random.default_rng(0)
    requests = [rng.integers(4, 90, size=(1 + i % 2, 3 + i % 3)).tolist() for i in range(24)]
    before = _batch_counts(server, "translator", "translate_ids")
    answers = request_many(server.url, [
        ("POST", "/v1/models/translator:predict",
         {"signature_name": "translate_ids", "instances": ids}) for ids in requests], clients=12)
    for ids, (status, answer, _) in zip(requests, answers, strict=True):
        assert status == 200, answer
        assert_same_answer(answer, expected("translator", "translate_ids",
                                            {"encoder_token_ids": np.array(ids, np.int32)}))
    assert _batch_counts(server, "translator", "translate_ids")["count"] - before["count"] < 24


class GatedSignature:
    """A signature whose batches wait for the test to open `gate`; it records
    the rows of each batch and fails a batch holding a row of -1."""

    name = "gated"

    def __init__(self):
        self.gate = threading.Event()
        self.batches = []

    def run_batch(self, requests):
        assert self.gate.wait(30)
        rows = [int(v) for r in requests for v in r["x"]]
        self.batches.append(rows)
        if -1 in rows:
            raise ValueError("row -1 breaks the signature")
        return [{"y": r["x"] * 2} for r in requests]


def _batcher(max_batch_size=4, timeout_s=0.0, max_queued=8, single=False):
    signature = GatedSignature()
    threads = BatchThreads(1)
    policy = BatchPolicy(max_batch_size, timeout_s, max_queued, single)
    return signature, threads, Batcher(signature, threads, policy)


def _submit(batcher, value, key="k", rows=1, deadline=None):
    inputs = {"x": np.full(rows, value)}
    return batcher.submit(inputs, rows, key, deadline or time.monotonic() + 30)


def test_the_queue_is_bounded_and_batches_take_whole_requests_by_key():
    signature, threads, batcher = _batcher()

    async def main():
        first = _submit(batcher, 0)  # runs at once, and waits at the gate
        await asyncio.sleep(0.05)
        tasks = [_submit(batcher, v, key=("a" if v % 2 else "b")) for v in range(1, 9)]
        with pytest.raises(RequestError) as refused:
            _submit(batcher, 99)
        with pytest.raises(RequestError) as too_big:
            _submit(batcher, 98, rows=5)
        signature.gate.set()
        results = await asyncio.gather(first.future, *(t.future for t in tasks))
        return refused.value, too_big.value, results

    refused, too_big, results = asyncio.run(main())
    threads.shutdown()
    assert refused.status == 503 and "queue" in refused.message and "full" in refused.message
    assert too_big.status == 400 and "at most 4" in too_big.message
    assert [int(r["y"][0]) for r in results] == [2 * v for v in range(9)]
    assert signature.batches[0] == [0]
    assert sorted(map(sorted, signature.batches[1:])) == [[1, 3, 5, 7], [2, 4, 6, 8]]


def test_a_request_past_its_deadline_or_cancelled_leaves_its_batch():
    signature, threads, batcher = _batcher(timeout_s=0.0)

    async def main():
        first = _submit(batcher, 0)
        await asyncio.sleep(0.05)
        late = _submit(batcher, 1, deadline=time.monotonic() + 0.01)
        gone = _submit(batcher, 2)
        kept = _submit(batcher, 3)
        batcher.cancel(gone)  # its client disconnected
        assert batcher.queued == 2
        await asyncio.sleep(0.05)
        signature.gate.set()
        await first.future
        with pytest.raises(RequestError) as deadline:
            await late.future
        return deadline.value, await kept.future

    deadline, kept = asyncio.run(main())
    threads.shutdown()
    assert deadline.status == 504
    assert int(kept["y"][0]) == 6 and signature.batches == [[0], [3]]


def test_alone_each_request_is_its_own_call_whatever_its_rows():
    signature, threads, batcher = _batcher(max_batch_size=1, max_queued=2, single=True)

    async def main():
        tasks = [_submit(batcher, v, key=None, rows=3) for v in (1, 2, 3)]  # 1 runs
        with pytest.raises(RequestError) as refused:
            _submit(batcher, 4, key=None)
        signature.gate.set()
        return refused.value, await asyncio.gather(*(t.future for t in tasks))

    refused, results = asyncio.run(main())
    threads.shutdown()
    assert refused.status == 503 and "2 requests waiting" in refused.message
    assert [r["y"].tolist() for r in results] == [[2, 2, 2], [4, 4, 4], [6, 6, 6]]
    assert signature.batches == [[1, 1, 1], [2, 2, 2], [3, 3, 3]]


def test_a_failing_batch_runs_again_one_request_at_a_time():
    signature, threads, batcher = _batcher(timeout_s=0.2)
    signature.gate.set()

    async def main():
        tasks = [_submit(batcher, v) for v in (4, -1, 5)]
        return await asyncio.gather(*(t.future for t in tasks), return_exceptions=True)

    good, bad, other = asyncio.run(main())
    threads.shutdown()
    assert int(good["y"][0]) == 8 and int(other["y"][0]) == 10
    assert isinstance(bad, RequestError) and "row -1" in bad.message
    assert signature.batches == [[4, -1, 5], [4], [-1], [5]]


def test_without_batching_each_request_is_a_call_of_its_own(tmp_path):
    from tests.export_fixtures import exported_classifier
    from tests.server_fixtures import add_version, running_server

    base = str(tmp_path / "classifier")
    add_version(exported_classifier(), base, 1)
    requests = [SENTENCES[i:i + 1 + i % 3] for i in range(20)]
    with running_server({"classifier": base}, batching=None) as server:
        answers = request_many(server.url, [
            ("POST", "/v1/models/classifier:predict", {"instances": sentences})
            for sentences in requests], clients=8)
        counts = _batch_counts(server, "classifier", "serving_default")
    for sentences, (status, answer, _) in zip(requests, answers, strict=True):
        assert status == 200, answer
        assert_same_answer(answer, expected("classifier", "serving_default",
                                            {"sentences": texts(sentences)}))
    assert counts == {"count": 20.0, "sum": float(sum(len(r) for r in requests))}
