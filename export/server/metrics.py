"""The server's Prometheus metrics, under TensorFlow Serving's names.

Served at `/monitoring/prometheus/metrics` (TensorFlow Serving's default
path), in the text format `prometheus_client` writes:

| metric | type | labels | what |
|---|---|---|---|
| `:tensorflow:serving:request_count` | counter | model_name, API, status | requests answered, by outcome (OK, INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, ...) |
| `:tensorflow:serving:request_latency` | histogram | model_name, API | microseconds from arrival to answer |
| `:tensorflow:serving:batching_session:queuing_latency` | histogram | model_name, signature_name | microseconds a batch's oldest request waited |
| `:tensorflow:serving:batching_session:processed_batch_size` | histogram | model_name, signature_name | rows a batch ran |
| `:tensorflow:serving:batching_session:queued_rows` | gauge | model_name, version, signature_name | rows waiting now |

Each server has a registry of its own, so that several servers (tests) in
one process keep their counts apart.
"""

import prometheus_client
from prometheus_client.core import GaugeMetricFamily

#: HTTP status -> the error code TensorFlow Serving counts it under.
STATUS_CODES = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "UNIMPLEMENTED",
                413: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
                503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
_MICROSECONDS = (100, 250, 500, 1e3, 2.5e3, 5e3, 1e4, 2.5e4, 5e4, 1e5, 2.5e5, 5e5, 1e6,
                 2.5e6, 5e6, 1e7, 3e7)
_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PREFIX = ":tensorflow:serving:"


class _Queues:
    """Reads the rows queued in every batcher when Prometheus scrapes."""

    def __init__(self, manager):
        self.manager = manager

    def collect(self):
        family = GaugeMetricFamily(PREFIX + "batching_session:queued_rows",
                                   "Rows waiting for a batch.",
                                   labels=["model_name", "version", "signature_name"])
        for name, versions in list(self.manager.served.items()):
            for version, served in list(versions.items()):
                for signature, batcher in served.batchers.items():
                    family.add_metric([name, str(version), signature], batcher.queued)
        yield family


class ServerMetrics:
    """The metrics of one server (see the table above)."""

    def __init__(self):
        prometheus_client.disable_created_metrics()  # TensorFlow Serving has no `_created`
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self.requests = prometheus_client.Counter(
            PREFIX + "request_count", "Requests answered, by outcome.",
            ["model_name", "API", "status"], registry=self.registry)
        self.latency = prometheus_client.Histogram(
            PREFIX + "request_latency", "Microseconds from arrival to answer.",
            ["model_name", "API"], buckets=_MICROSECONDS, registry=self.registry)
        self.queuing = prometheus_client.Histogram(
            PREFIX + "batching_session:queuing_latency",
            "Microseconds from a batch's oldest request to the batch's start.",
            ["model_name", "signature_name"], buckets=_MICROSECONDS, registry=self.registry)
        self.batch_rows = prometheus_client.Histogram(
            PREFIX + "batching_session:processed_batch_size", "Rows a batch ran.",
            ["model_name", "signature_name"], buckets=_ROWS, registry=self.registry)

    def watch(self, manager):
        """Adds the queue gauge of `manager`'s batchers."""
        self.registry.register(_Queues(manager))

    def answered(self, model_name, api, status, seconds):
        code = STATUS_CODES.get(status, "UNKNOWN")
        self.requests.labels(model_name, api, code).inc()
        self.latency.labels(model_name, api).observe(seconds * 1e6)

    def batch_ran(self, model_name, signature_name, rows, requests, seconds, waited):
        self.batch_rows.labels(model_name, signature_name).observe(rows)
        self.queuing.labels(model_name, signature_name).observe(waited * 1e6)

    def exposition(self):
        """(body bytes, content type) of a scrape."""
        return prometheus_client.generate_latest(self.registry), \
            prometheus_client.CONTENT_TYPE_LATEST
