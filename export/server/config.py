"""What the server serves and how: its models, its batching, its limits.

The options are `tensorflow_model_server`'s where it has one (the command
line, `cli/serve_command.py`, names each flag after it), and the two config
files are read in its text format (`export.server.text_proto`):

`--model_config_file` (a `ModelServerConfig` holding a `model_config_list`):

```
model_config_list {
  config { name: "translator" base_path: "exported/translator" model_platform: "tensorflow" }
  config { name: "sst2" base_path: "exported/sst2"
           model_version_policy { latest { num_versions: 1 } } }
}
```

`--batching_parameters_file` (a `BatchingParameters`):

```
max_batch_size { value: 32 }
batch_timeout_micros { value: 2000 }
max_enqueued_batches { value: 8 }
num_batch_threads { value: 1 }
```

Defaults are TensorFlow Serving's: a batch of at most 1000 rows, no wait
(a batch is what queued while the previous one ran), 10 batches queued, one
batch thread a core.  Fields TensorFlow Serving has and this server does not
apply (`allowed_batch_sizes`, `pad_variable_length_inputs`, ...) are read
and named in `BatchingParameters.ignored`; an unknown field is an error
naming the file and line.
"""

import dataclasses
import os

from export.server import text_proto

#: `BatchingParameters` fields TensorFlow Serving reads that this server
#: accepts and does not apply: it batches only requests whose inputs have
#: the same shape and bucket, so it pads nothing and splits nothing.
IGNORED_BATCHING_FIELDS = (
    "allowed_batch_sizes", "pad_variable_length_inputs", "enable_large_batch_splitting",
    "max_execution_batch_size", "thread_pool_name", "mixed_priority_batching_policy",
)


@dataclasses.dataclass(frozen=True)
class BatchingParameters:
    """How concurrent requests to one signature are batched.

    Attributes:
        max_batch_size: The most rows one call of a signature runs.
        batch_timeout_micros: How long a batch that is not full waits for
            more requests after its first one arrived.
        max_enqueued_batches: Queued rows are bounded at this many full
            batches; a request past the bound is answered 503 at once.
        num_batch_threads: Batches that run at the same time, over all models.
        ignored: TensorFlow Serving fields read from the file and not applied.
    """

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    ignored: tuple = ()

    def __post_init__(self):
        for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
            _check_int(name, getattr(self, name), least=1)
        _check_int("batch_timeout_micros", self.batch_timeout_micros, least=0)

    @property
    def max_queued_rows(self):
        """Rows that may wait in one signature's queue."""
        return self.max_batch_size * self.max_enqueued_batches


def _check_int(name, value, least, where=""):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{where}{name} must be an integer >= {least}; received {value!r}.")


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """One served model: a base path of numbered version folders.

    Attributes:
        name: The `NAME` of `/v1/models/NAME`.
        base_path: A folder holding `1/`, `2/`, ... each a SavedModel export.
        num_versions: `latest` policy: serve this many of the highest versions.
        versions: `specific` policy: serve exactly these versions (overrides
            `num_versions`); empty for `latest`.
    """

    name: str
    base_path: str
    num_versions: int = 1
    versions: tuple = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or "/" in self.name \
                or ":" in self.name:
            raise ValueError(f"A model name must be a non-empty string without '/' or ':'; "
                             f"received {self.name!r}.")
        _check_int("num_versions", self.num_versions, least=1,
                   where=f"model {self.name!r}: ")
        for version in self.versions:
            _check_int("versions", version, least=0, where=f"model {self.name!r}: ")

    def aspired(self, present):
        """The versions to serve among `present` (version numbers on disk)."""
        if self.versions:
            return sorted(set(present) & set(self.versions))
        return sorted(present)[-self.num_versions:]


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """Everything `export.server.main.serve` needs (see `cli/serve_command.py`).

    Attributes:
        models: The `ModelSource`s served.
        host, port: Where the REST API listens (port 0: any free port).
        batching: `BatchingParameters`, or None: each request runs alone.
        poll_seconds: Seconds between scans of the base paths (0: scan
            once at start; negative: never scan again).
        timeout_ms: A request's deadline, from its arrival.
        num_threads: Requests that run at the same time without batching.
        max_body_bytes: The largest request body read (413 past it).
        warmup: Run each signature's first batch before a version is AVAILABLE.
        xla_warmup_buckets: Also compile every bucket of the XLA signatures
            (batch sizes in powers of two up to the batch size, every
            source-length bucket) before AVAILABLE.
        log_requests: One log line per request (method, path, status, ms).
        metrics_path: Where Prometheus reads the metrics.
        intra_op_threads, inter_op_threads: TensorFlow's thread pools (0:
            TensorFlow's choice), set before the first model loads.
    """

    models: tuple
    host: str = "127.0.0.1"
    port: int = 8501
    batching: BatchingParameters | None = None
    poll_seconds: float = 1.0
    timeout_ms: int = 30_000
    num_threads: int = dataclasses.field(default_factory=lambda: 4 * (os.cpu_count() or 1))
    max_body_bytes: int = 64 << 20
    warmup: bool = True
    xla_warmup_buckets: bool = False
    log_requests: bool = False
    metrics_path: str = "/monitoring/prometheus/metrics"
    intra_op_threads: int = 0
    inter_op_threads: int = 0

    def __post_init__(self):
        if not self.models:
            raise ValueError("Serve at least one model: --model_name and --model_base_path, "
                             "or --model_config_file.")
        names = [model.name for model in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"Model names must differ; received {names}.")
        _check_int("port", self.port, least=0)
        for name in ("timeout_ms", "num_threads", "max_body_bytes"):
            _check_int(name, getattr(self, name), least=1)
        for name in ("intra_op_threads", "inter_op_threads"):
            _check_int(name, getattr(self, name), least=0)
        if not self.metrics_path.startswith("/") or self.metrics_path.startswith("/v1/"):
            raise ValueError(f"The metrics path must start with '/' and not be under /v1/; "
                             f"received {self.metrics_path!r}.")


def read_model_config(path):
    """The `ModelSource`s of a `--model_config_file` (`model_config_list`).

    Relative base paths are read from the current folder, as TensorFlow
    Serving reads them.
    """
    root = text_proto.read(path)
    root.check_fields({"model_config_list"}, "the model server config")
    config_list = root.single("model_config_list", text_proto.Message)
    if config_list is None:
        raise ValueError(f"{path}: holds no model_config_list {{ config {{ ... }} }}.")
    config_list.check_fields({"config"}, "model_config_list")
    sources = [_model_source(config, path) for config in config_list.values("config")]
    if not sources:
        raise ValueError(f"{path}:{config_list.line}: model_config_list holds no config.")
    return tuple(sources)


def _model_source(config, path):
    if not isinstance(config, text_proto.Message):
        raise ValueError(f"{path}: config must be a message {{ name: ... base_path: ... }}.")
    config.check_fields({"name", "base_path", "model_platform", "model_version_policy"},
                        "config")
    name, base_path = config.single("name", str), config.single("base_path", str)
    for field, value in (("name", name), ("base_path", base_path)):
        if not value:
            raise ValueError(f"{path}:{config.line}: config needs a {field}.")
    platform = config.single("model_platform", str, "tensorflow")
    if platform != "tensorflow":
        raise ValueError(f"{path}:{config.line_of('model_platform')}: model_platform "
                         f"{platform!r} is not served; this server serves 'tensorflow'.")
    num_versions, versions = 1, ()
    policy = config.single("model_version_policy", text_proto.Message)
    if policy is not None:
        policy.check_fields({"latest", "specific"}, "model_version_policy")
        latest, specific = (policy.single(n, text_proto.Message) for n in ("latest",
                                                                            "specific"))
        if latest is not None:
            latest.check_fields({"num_versions"}, "latest")
            num_versions = latest.single("num_versions", int, 1)
        if specific is not None:
            specific.check_fields({"versions"}, "specific")
            versions = tuple(specific.values("versions"))
    try:
        return ModelSource(name, base_path, num_versions, versions)
    except ValueError as error:
        raise ValueError(f"{path}:{config.line}: {error}") from None


def read_batching_parameters(path):
    """The `BatchingParameters` of a `--batching_parameters_file`."""
    root = text_proto.read(path)
    applied = ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
               "num_batch_threads")
    root.check_fields(set(applied) | set(IGNORED_BATCHING_FIELDS), "BatchingParameters")
    values = {}
    for name in applied:
        wrapper = root.single(name, text_proto.Message)
        if wrapper is None:
            continue
        wrapper.check_fields({"value"}, name)
        values[name] = wrapper.single("value", int)
        if values[name] is None:
            raise ValueError(f"{path}:{wrapper.line}: {name} {{ value: N }} needs a value.")
    ignored = tuple(name for name in IGNORED_BATCHING_FIELDS if root.values(name))
    try:
        return BatchingParameters(**values, ignored=ignored)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def read_monitoring_config(path):
    """The metrics path of a `--monitoring_config_file` (`prometheus_config`)."""
    root = text_proto.read(path)
    root.check_fields({"prometheus_config"}, "the monitoring config")
    prometheus = root.single("prometheus_config", text_proto.Message)
    if prometheus is None:
        raise ValueError(f"{path}: holds no prometheus_config {{ enable: true path: ... }}.")
    prometheus.check_fields({"enable", "path"}, "prometheus_config")
    if prometheus.single("enable", bool, True) is False:
        raise ValueError(f"{path}:{prometheus.line_of('enable')}: enable: false is not "
                         f"served; this server always serves its metrics (leave the file "
                         f"out, or set a path).")
    return prometheus.single("path", str, ServerOptions.metrics_path)
