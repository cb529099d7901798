"""Concurrent requests to one signature, run together as one call.

Each (model, version, signature) has a `Batcher`: a bounded queue per batch
key (`export.server.batch_keys`).  Once a batch thread is free, a queue
becomes a batch when it holds `max_batch_size` rows, or when no request
has joined it for `batch_timeout_micros` (and at most ten timeouts after
its first request arrived or the thread became free, whichever is later);
the oldest ready queue goes first.  A batch takes whole requests, oldest
first, up to `max_batch_size` rows.

This is where it differs from TensorFlow Serving's scheduler, which runs a
batch a timeout after its first request arrived: while a batch runs, the
clients it will answer are silent, and those who queued meanwhile would
run at once, without them, as a batch of half the size; clients answered
together then stay in two halves for good.  Counting from the latest
arrival, and from the moment the thread is free, lets the answered
clients' next requests join, so that 32 clients fill batches of 32.  A
request alone waits one timeout, as there.

Everything here runs on the event loop except the call itself, which runs
in one of the `BatchThreads` (TensorFlow never runs on the loop):

* past the queue's bound (`max_enqueued_batches` full batches of rows) a
  request is refused at once (`unavailable`, 503), so the queue never grows;
* a request whose deadline passes or whose client goes away is `cancel`led:
  its rows leave the queue at once and it never joins a batch (a batch
  already running finishes; its answer is dropped);
* a batch that fails runs again one request at a time, so a request that
  breaks the signature gets the error and the others their answers.

Without batching (`single`), each request is a call of its own.
"""

import asyncio
import collections
import concurrent.futures
import dataclasses
import time

from export.server.errors import (
    RequestError,
    bad_request,
    deadline_exceeded,
    from_exception,
    unavailable,
)

QUEUED, RUNNING, DONE = "queued", "running", "done"
_NO_KEY = object()  # `_ready`'s "no queue is ready" (None is a key like any other)


@dataclasses.dataclass(frozen=True)
class BatchPolicy:
    """How one signature's requests are batched.

    Attributes:
        max_batch_size: The most rows a batch holds (and a request may send).
        timeout_s: How long a queue that is not full waits after its first request.
        max_queued: Rows (requests, when `single`) that may wait.
        single: Each request alone: no batching, and no row limit.
    """

    max_batch_size: int
    timeout_s: float
    max_queued: int
    single: bool = False


class Task:
    """One request waiting for, or in, a batch."""

    __slots__ = ("inputs", "rows", "key", "deadline", "future", "state", "arrived")

    def __init__(self, inputs, rows, key, deadline, future):
        self.inputs, self.rows, self.key, self.deadline = inputs, rows, key, deadline
        self.future = future
        self.state = QUEUED
        self.arrived = time.monotonic()


class BatchThreads:
    """The threads that run batches, shared by every `Batcher`, and their free slots."""

    def __init__(self, count, name="batch"):
        self.count = count
        self.executor = concurrent.futures.ThreadPoolExecutor(count, thread_name_prefix=name)
        self.free = count
        self.freed_at = 0.0  # when a thread last became free (time.monotonic)
        self._waiting = collections.OrderedDict()  # batchers waiting for a slot

    def acquire(self, batcher):
        """Takes a slot, or puts `batcher` in line for the next one."""
        if self.free:
            self.free -= 1
            return True
        self._waiting[batcher] = None
        return False

    def release(self):
        self.free += 1
        self.freed_at = time.monotonic()
        while self.free and self._waiting:
            batcher, _ = self._waiting.popitem(last=False)
            batcher.schedule()

    def shutdown(self):
        self.executor.shutdown(wait=True)


class Batcher:
    """The batches of one signature (`ServedSignature.run_batch`).

    Args:
        signature: What runs a batch: `run_batch(list of inputs)`.
        threads: The shared `BatchThreads`.
        policy: Its `BatchPolicy`.
        on_batch: Called as `on_batch(rows, requests, seconds, waited)` after
            each batch ran (`waited`: its oldest request's time in the queue),
            or None.
    """

    def __init__(self, signature, threads, policy, on_batch=None):
        self.signature = signature
        self.threads = threads
        self.policy = policy
        self.on_batch = on_batch
        self.queued = 0  # rows (requests when single) waiting
        self.running = 0  # batches running
        self._queues = collections.OrderedDict()  # key -> deque of Task
        self._key_rows = collections.Counter()
        self._joined = {}  # key -> when its newest request arrived
        self._timer = None

    def _units(self, task):
        return 1 if self.policy.single else task.rows

    def submit(self, inputs, rows, key, deadline):
        """Queues a request; returns its `Task` (await `task.future`).

        Raises:
            RequestError: 400 for more rows than a batch holds, 503 when
                the queue is full.
        """
        policy = self.policy
        if not policy.single and rows > policy.max_batch_size:
            raise bad_request(f"The request has {rows} rows; a batch holds at most "
                              f"{policy.max_batch_size} (max_batch_size).")
        units = 1 if policy.single else rows
        if self.queued + units > policy.max_queued:
            raise unavailable(f"The queue of signature {self.signature.name!r} is full "
                              f"({self.queued} {'requests' if policy.single else 'rows'} "
                              f"waiting, at most {policy.max_queued}); retry later.")
        task = Task(inputs, rows, key, deadline, asyncio.get_running_loop().create_future())
        self._queues.setdefault(key, collections.deque()).append(task)
        self._key_rows[key] += units
        self._joined[key] = task.arrived
        self.queued += units
        self.schedule()
        return task

    def cancel(self, task):
        """Takes `task` out of its queue (a deadline passed, its client left)."""
        if task.state == QUEUED:
            self._dequeued(task)
        task.state = DONE

    def _dequeued(self, task):
        units = self._units(task)
        self.queued -= units
        self._key_rows[task.key] -= units
        if not self._key_rows[task.key]:
            del self._key_rows[task.key]

    def _head(self, key):
        """The oldest queued task of `key`'s queue (done ones dropped), or None."""
        queue = self._queues[key]
        while queue and queue[0].state != QUEUED:
            queue.popleft()
        if not queue:
            del self._queues[key]
            self._joined.pop(key, None)
            return None
        return queue[0]

    def _ready(self, now):
        """The key of the oldest ready queue, and the time the next one gets ready."""
        ready, ready_arrival, next_time = _NO_KEY, None, None
        full = 1 if self.policy.single else self.policy.max_batch_size
        for key in list(self._queues):
            head = self._head(key)
            if head is None:
                continue
            timeout, freed = self.policy.timeout_s, self.threads.freed_at
            due = min(max(self._joined[key], freed) + timeout,
                      max(head.arrived, freed) + 10 * timeout)
            if self._key_rows[key] >= full or due <= now:
                if ready is _NO_KEY or head.arrived < ready_arrival:
                    ready, ready_arrival = key, head.arrived
            elif next_time is None or due < next_time:
                next_time = due
        return ready, next_time

    def _take(self, key, now):
        """Whole requests from `key`'s queue, oldest first, up to a batch."""
        queue, batch, rows = self._queues[key], [], 0
        while queue:
            task = queue[0]
            if task.state != QUEUED:
                queue.popleft()
                continue
            if batch and (self.policy.single or rows + task.rows > self.policy.max_batch_size):
                break
            queue.popleft()
            self._dequeued(task)
            if task.deadline <= now:
                task.state = DONE
                if not task.future.done():
                    task.future.set_exception(deadline_exceeded(
                        "The request's deadline passed while it waited for a batch."))
                continue
            task.state = RUNNING
            batch.append(task)
            rows += task.rows
        if not queue:
            self._queues.pop(key, None)
            self._joined.pop(key, None)
        return batch

    def schedule(self):
        """Starts every batch that is ready and has a thread; arms the next timer."""
        loop = asyncio.get_running_loop()
        while True:
            now = time.monotonic()
            key, next_time = self._ready(now)
            if key is _NO_KEY:
                break
            if not self.threads.acquire(self):
                return  # `release` calls again
            batch = self._take(key, now)
            if not batch:
                self.threads.release()
                continue
            self.running += 1
            started = time.monotonic()
            future = loop.run_in_executor(self.threads.executor, self._run,
                                          [task.inputs for task in batch])
            future.add_done_callback(
                lambda f, batch=batch, started=started: self._finished(batch, f, started))
        if next_time is not None:
            delay = max(next_time - time.monotonic(), 0.0)
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_later(delay, self.schedule)

    def _run(self, inputs):
        """In a batch thread: the outputs (or the error) of each request."""
        try:
            return self.signature.run_batch(inputs)
        except Exception as error:  # noqa: BLE001  (answered to the requests, below)
            if len(inputs) == 1:
                return [from_exception(error)]
        results = []
        for one in inputs:
            try:
                results.append(self.signature.run_batch([one])[0])
            except Exception as error:  # noqa: BLE001
                results.append(from_exception(error))
        return results

    def _finished(self, batch, future, started):
        self.running -= 1
        try:
            results = future.result()
        except BaseException as error:  # the executor shut down under it
            results = [from_exception(error)] * len(batch)
        for task, result in zip(batch, results, strict=True):
            if task.state == RUNNING and not task.future.done():
                if isinstance(result, RequestError):
                    task.future.set_exception(result)
                else:
                    task.future.set_result(result)
            task.state = DONE
        if self.on_batch is not None:
            waited = started - min(task.arrived for task in batch)
            self.on_batch(sum(t.rows for t in batch), len(batch), time.monotonic() - started,
                          waited)
        # The thread is free once the answers are written (the handlers woken
        # above run first): the timeout then counts from when their clients
        # can send again.
        asyncio.get_running_loop().call_soon(self._release)

    def _release(self):
        self.threads.release()
        self.schedule()
