"""`tf.distribute` strategies by name, for data-parallel training (Section 5.2).

The paper trains on one machine with 8 P100 GPUs, synchronously; here that is
`build_strategy("mirrored")`, and several machines are `"multi_worker"`.

Example:

```python
from training.distribute import build_strategy, global_batch_note

strategy = build_strategy("mirrored")
print(global_batch_note(batch_size=64, strategy=strategy))
with strategy.scope():
    model = ...  # build and compile inside the scope
model.fit(dataset)  # dataset batches are global batches
```
"""

import dataclasses
import itertools
import json
import os

import tensorflow as tf

STRATEGY_NAMES = ("default", "mirrored", "multi_worker", "one_device")


def build_strategy(name):
    """Returns the `tf.distribute.Strategy` called `name`.

    Args:
        name: str, one of `STRATEGY_NAMES`:
            * `"default"`: `tf.distribute.get_strategy()` (no distribution,
              or the strategy whose scope is open).
            * `"mirrored"`: `MirroredStrategy` over every local GPU; without a
              GPU, over every logical CPU when there is more than one (see
              `configure_logical_cpus`), else over the single CPU. Each call
              gets its own collective keys, so one process can build several.
            * `"multi_worker"`: `MultiWorkerMirroredStrategy`, its cluster read
              from the `TF_CONFIG` environment variable (validated first);
              a subclass whose `reduce` works around a Keras 3 `fit` bug.
              Only the chief (worker 0) writes to the run directory; a
              worker that dies rejoins from the last checkpoint when the
              cluster restarts (`training.runs.resume.ResumableCheckpoint`,
              see `_KerasMultiWorkerMirroredStrategy`).
            * `"one_device"`: `OneDeviceStrategy` on the first GPU, else CPU.

    Returns:
        A `tf.distribute.Strategy`.

    Raises:
        ValueError: for an unknown `name`, or a missing or malformed
            `TF_CONFIG` with `"multi_worker"`.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = gpus or tf.config.list_logical_devices("CPU")
        return _FreshKeysMirroredStrategy([d.name for d in devices])
    if name == "multi_worker":
        validate_tf_config(os.environ.get("TF_CONFIG"))
        return _KerasMultiWorkerMirroredStrategy()
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        device = gpus[0].name if gpus else tf.config.list_logical_devices("CPU")[0].name
        return tf.distribute.OneDeviceStrategy(device)
    raise ValueError(
        f"Unknown strategy name={name!r}. Expected one of: {', '.join(STRATEGY_NAMES)}."
    )


def validate_tf_config(value):
    """Checks a `TF_CONFIG` value for `MultiWorkerMirroredStrategy`.

    Args:
        value: str or None, the value of the `TF_CONFIG` environment variable:
            JSON like `{"cluster": {"worker": ["host:port", ...]},
            "task": {"type": "worker", "index": 0}}`.

    Returns:
        The parsed dict.

    Raises:
        ValueError: naming `TF_CONFIG` and quoting `value` when it is unset,
            not JSON, or lacks a cluster with workers or a valid task.
    """

    def fail(reason):
        raise ValueError(
            f"TF_CONFIG {reason}; MultiWorkerMirroredStrategy needs a JSON value "
            'like {"cluster": {"worker": ["host1:port", "host2:port"]}, '
            f'"task": {{"type": "worker", "index": 0}}}}. Received: TF_CONFIG={value!r}'
        )

    if not value:
        fail("is not set")
    try:
        config = json.loads(value)
    except json.JSONDecodeError as error:
        fail(f"is not valid JSON ({error})")
    if not isinstance(config, dict):
        fail("is not a JSON object")
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not any(
        isinstance(cluster.get(job), list) and cluster.get(job)
        for job in ("worker", "chief")
    ):
        fail('has no "cluster" with a non-empty "worker" (or "chief") address list')
    task = config.get("task")
    if not isinstance(task, dict) or task.get("type") not in cluster:
        fail(f'has no "task" whose "type" is one of the cluster jobs {sorted(cluster)}')
    index = task.get("index")
    addresses = cluster[task["type"]]
    if not isinstance(index, int) or not 0 <= index < len(addresses):
        fail(f'has a "task" "index" outside 0..{len(addresses) - 1}')
    return config


def configure_logical_cpus(n):
    """Splits the first physical CPU into `n` logical devices.

    Lets `build_strategy("mirrored")` run `n` replicas on a CPU-only machine
    (CI tests of the distributed code paths). Calling it again with the
    current number of logical CPUs is a no-op.

    Args:
        n: int >= 1.

    Raises:
        ValueError: if `n` is not a positive integer.
        RuntimeError: if TensorFlow has already initialised its devices with
            a different number of logical CPUs: call this first thing, before
            any op, `tf.config.list_logical_devices` or strategy.
    """
    if int(n) != n or n < 1:
        raise ValueError(f"`n` must be a positive integer. Received: n={n}")
    cpu = tf.config.list_physical_devices("CPU")[0]  # does not initialise TF
    current = tf.config.get_logical_device_configuration(cpu)
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(int(n))]
        )
    except RuntimeError as error:
        configured = len(current) if current else 1
        if configured == n:
            return
        raise RuntimeError(
            f"configure_logical_cpus({n}) must be called before TensorFlow "
            "initialises its devices (before the first op, "
            "tf.config.list_logical_devices or building a strategy); they are "
            f"already initialised with {configured} logical CPU(s)."
        ) from error


@dataclasses.dataclass(frozen=True)
class WorkerRole:
    """This process's part in a run, read once from `TF_CONFIG`.

    Attributes:
        is_chief: whether it writes the run directory (checkpoints, plan,
            scores, summaries, the final model): the "chief" task, or
            worker 0 of a cluster without one, or the one process of a run
            without a cluster.
    """

    is_chief: bool


def worker_role(tf_config=None):
    """The `WorkerRole` that `tf_config` (default: the `TF_CONFIG`
    environment variable, a JSON string) gives this process."""
    if tf_config is None:
        tf_config = os.environ.get("TF_CONFIG", "")
    parsed = json.loads(tf_config or "{}")
    task = parsed.get("task", {})
    kind = task.get("type", "worker")
    first_worker = kind == "worker" and int(task.get("index", 0)) == 0
    return WorkerRole(kind == "chief" or (first_worker and "chief" not in parsed.get("cluster", {})))


def worker_position(strategy):
    """(workers in the cluster, this worker's index) of `strategy`.

    A multi-worker strategy's `cluster_resolver` (read from `TF_CONFIG`)
    gives both: a "chief" task, when the cluster has one, is worker 0 and
    the "worker" tasks follow it.  Any other strategy runs in one process:
    (1, 0).  A streamed corpus is cut into the workers' shares by this
    (`training.pipeline.streaming.worker_sharding`).

    Args:
        strategy: a `tf.distribute.Strategy`.

    Returns:
        (num_workers, worker_index), ints.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not spec.get("worker") and not spec.get("chief"):
        return 1, 0
    chiefs = len(spec.get("chief", []))
    index = int(resolver.task_id) + (chiefs if resolver.task_type == "worker" else 0)
    return chiefs + len(spec.get("worker", [])), index


def barrier(strategy):
    """Returns once every worker of `strategy` has called it (a no-op in one
    process).

    Only the chief writes the run directory, and the other workers read
    what it wrote (epoch scores and checkpoints, to select the model), so
    they wait here for it first: a worker that read them early would make
    other collective calls than the chief, and the run would fail with a
    shape mismatch or hang.
    """
    if worker_position(strategy)[0] > 1:
        strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)


def worker_batch_note(num_workers):
    """A one-line note on how the workers' own batches make a global batch.

    A streamed corpus is not sharded by `tf.distribute`: each worker batches
    its own share as one process would (`tokens_per_batch` / `batch_size`),
    so one step's global batch is the W workers' batches together, about W
    times one worker's, and its gradient is that of the global batch (the
    loss divides by the real tokens of all of it).
    """
    return (
        f"Each of the {num_workers} workers batches its own share: batch sizes in the "
        f"config are per-worker batches, and a step's global batch is the {num_workers} "
        "workers' batches together."
    )


def global_batch_note(batch_size, strategy):
    """A one-line note on how `batch_size` splits across `strategy`'s replicas.

    How batch size and learning rate scale with replicas:

    * Keras treats the batch given to `fit` (or the dataset's batch) as the
      *global* batch: each of the R replicas gets `batch_size / R` examples,
      and the summed gradients are those of the global batch.
    * `MaskedSparseCategoricalCrossentropy` divides by the number of real
      tokens in the global batch, so R replicas take exactly the step one
      device would take on the same global batch. The learning rate needs no
      change when the global batch is unchanged.
    * The paper's schedule was tuned for global batches of about 25,000
      source and 25,000 target tokens on 8 GPUs (Section 5.1). Keeping the
      per-replica batch fixed while adding replicas grows the global batch R
      times; then raise `TransformerSchedule(scale=...)` with care (linear
      scaling is an upper bound) and keep `warmup_steps` in optimizer steps.

    Args:
        batch_size: int, the global batch size given to `fit`.
        strategy: a `tf.distribute.Strategy`.

    Returns:
        A str to log at the start of training.
    """
    replicas = strategy.num_replicas_in_sync
    kind = next(c.__name__ for c in type(strategy).__mro__ if c.__name__[0] != "_")
    if batch_size % replicas:
        return (
            f"global batch {batch_size} does not split evenly over {replicas} "
            "replicas: the replicas get unequal batches"
        )
    return (
        f"global batch {batch_size} = {replicas} replica(s) x "
        f"{batch_size // replicas} per replica ({kind})"
    )


class _KerasMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """`MultiWorkerMirroredStrategy` whose `reduce` works for Keras 3's `fit`.

    Keras 3.15 `fit` calls `strategy.reduce("MEAN", (x, y, w), axis=None)` on
    a whole nested batch (`_maybe_symbolic_build`), and
    `strategy.reduce("MEAN", metric, axis=0)` on scalar metric results
    (`reduce_per_replica`). With more than one worker the collective reduce
    accepts neither a nest nor axis 0 of a scalar, so `fit` fails before
    the first step (keras-team/keras#20585, tensorflow/tensorflow#72388).
    This reduces a scalar over replicas only, and gives the data batch its
    worker's own values (the build needs its shapes, not a mean of token ids).
    A scalar metric result is a plain tensor computed in this worker's
    replica; the collective reduce all-reduces it across the workers
    (`CollectiveAllReduceExtended._reduce_to`), so every worker logs the
    same, mean, figures after each batch (tests/test_multiworker_streaming.py).

    Fault tolerance: `MultiWorkerMirroredStrategy` cannot take a restarted
    worker back into a running collective group; when a worker dies, the
    others' collectives fail and the cluster (all its workers) restarts.
    The restarted workers then rejoin from the chief's last
    `ResumableCheckpoint` (shared run directory), not from Keras'
    `BackupAndRestore`: both need every worker to restore the same state,
    but `ResumableCheckpoint` resumes at the checkpoint's step (each
    worker's stream is a pure function of the seed and its share, so
    `from_step` re-reads exactly the batches after it), where
    `BackupAndRestore` restarts an interrupted epoch from its first batch and
    overwrites its one backup in place (a kill during the write loses it).
    """

    def reduce(self, reduce_op, value, axis):
        if axis is None and tf.nest.is_nested(value):
            # `fit`'s reduce of its first data batch, which only gives the
            # model's symbolic build a batch to trace: each worker's own
            # first batch serves.  Workers that stream their own shares
            # (`training.pipeline.streaming.worker_sharding`) batch
            # examples of other lengths, and a collective reduce of batches
            # of different shapes fails ("Shape mismatch in the collective").
            return tf.nest.map_structure(
                lambda leaf: self.experimental_local_results(leaf)[0], value)
        parent = super()

        def reduce_leaf(leaf):
            local = (
                leaf.values[0]
                if isinstance(leaf, tf.distribute.DistributedValues)
                else leaf
            )
            leaf_axis = None if len(getattr(local, "shape", ())) == 0 else axis
            return parent.reduce(reduce_op, leaf, leaf_axis)

        return tf.nest.map_structure(reduce_leaf, value)


class _FreshKeysMirroredStrategy(tf.distribute.MirroredStrategy):
    """`MirroredStrategy` whose collective ops never reuse another's keys.

    Every `MirroredStrategy` numbers its all-reduce collectives from group
    key 1, and the runtime caches each collective's parameters by key, so a
    second strategy in the same process (a second model, a test suite) fails
    with "Shape mismatch in the collective instance"
    (tensorflow/tensorflow#62790). TF's own tests avoid this with the
    `_collective_key_base` hook, which this sets per instance.
    """

    _key_bases = itertools.count(start=0, step=100_000)

    def __init__(self, devices):
        self._collective_key_base = next(self._key_bases)
        super().__init__(devices)
