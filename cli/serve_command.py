"""`python -m export serve`: the flags of `tensorflow_model_server`, read into `ServerOptions`.

```
python -m export serve --model_name translator --model_base_path exported/translator \\
    --rest_api_port 8501 --enable_batching --batching_parameters_file batching.config
python -m export serve --model_config_file models.config --rest_api_port 8501
```

The flags are TensorFlow Serving's where it has them, written as it writes
them (`--flag=value`, booleans as `--enable_batching` or
`--enable_batching=false`), so a launch script swaps one server for the
other.  `--port` (TensorFlow Serving's gRPC port) and
`--xla_cpu_compilation_enabled` (XLA is always on here) are accepted and
have nothing to set.  Ours: `--rest_api_host` (127.0.0.1 unless told
otherwise), `--rest_api_max_body_bytes`, `--xla_warmup_buckets`,
`--log_requests`.  Nothing here imports TensorFlow: a bad flag answers at
once.
"""

import argparse
import os
import sys

from export.server import config as server_config


def _bool(text):
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false; received {text!r}")


def _flag(parser, name, help, type=str, default=None):
    if type is bool:
        parser.add_argument(name, type=_bool, nargs="?", const=True, default=bool(default),
                            metavar="true|false", help=help)
    else:
        parser.add_argument(name, type=type, default=default, help=help)


def add_serve_parser(commands):
    """The `serve` subparser; returns it."""
    parser = commands.add_parser(
        "serve", help="Serve exports over TensorFlow Serving's REST API (with batching).",
        description="Serve the numbered SavedModel versions under each base path over "
        "TensorFlow Serving's REST API: predict, status, metadata, Prometheus metrics, and a "
        'page at / to try them. Needs pip install -e ".[serve]".')
    _flag(parser, "--model_name", "Name of the model (/v1/models/NAME).", default="default")
    _flag(parser, "--model_base_path", "Folder of numbered versions (1/, 2/, ...) to serve.")
    _flag(parser, "--model_config_file", "Several models: a model_config_list in text format "
          "(name, base_path, model_version_policy).")
    _flag(parser, "--rest_api_port", "Port of the REST API (0: a free one).", int, 8501)
    _flag(parser, "--rest_api_host", "Address to listen on.", default="127.0.0.1")
    _flag(parser, "--enable_batching", "Batch concurrent requests to a signature.", bool)
    _flag(parser, "--batching_parameters_file", "BatchingParameters in text format "
          "(max_batch_size, batch_timeout_micros, max_enqueued_batches, num_batch_threads).")
    _flag(parser, "--file_system_poll_wait_seconds", "Seconds between scans for new versions "
          "(0: at start only; negative: never).", float, 1.0)
    _flag(parser, "--rest_api_timeout_in_ms", "A request's deadline (504 past it).", int, 30000)
    _flag(parser, "--rest_api_num_threads", "Requests run at once without batching "
          "(default: 4 per core).", int)
    _flag(parser, "--rest_api_max_body_bytes", "Largest request body (413 past it).", int,
          64 << 20)
    _flag(parser, "--enable_model_warmup", "Run each signature once before a version is "
          "AVAILABLE.", bool, True)
    _flag(parser, "--xla_warmup_buckets", "Also compile every bucket of the _xla signatures "
          "before AVAILABLE: batch sizes in powers of two up to max_batch_size, times source "
          "lengths (a few seconds each: keep max_batch_size small).", bool)
    _flag(parser, "--tensorflow_intra_op_parallelism", "TensorFlow's intra-op threads "
          "(0: its default).", int, 0)
    _flag(parser, "--tensorflow_inter_op_parallelism", "TensorFlow's inter-op threads "
          "(0: its default).", int, 0)
    _flag(parser, "--monitoring_config_file", "prometheus_config { path: ... } in text format "
          "(the metrics are served at /monitoring/prometheus/metrics without it).")
    _flag(parser, "--log_requests", "One log line per request.", bool)
    _flag(parser, "--port", "TensorFlow Serving's gRPC port: accepted, no gRPC API here.", int)
    _flag(parser, "--xla_cpu_compilation_enabled", "Accepted: XLA is always on here.", bool,
          True)
    return parser


def server_options(args):
    """The `ServerOptions` of parsed `serve` arguments (the config files read).

    Raises:
        ValueError: On a flag, file or model folder that cannot be served,
            naming it.
    """
    if args.model_config_file and args.model_base_path:
        raise ValueError("Give --model_config_file or --model_base_path, not both.")
    if args.model_config_file:
        models = server_config.read_model_config(args.model_config_file)
    elif args.model_base_path:
        models = (server_config.ModelSource(args.model_name, args.model_base_path),)
    else:
        raise ValueError("Nothing to serve: give --model_base_path (and --model_name), or "
                         "--model_config_file.")
    for model in models:
        if not os.path.isdir(model.base_path):
            raise FileNotFoundError(f"The base path of model {model.name!r} is not a folder: "
                                    f"{model.base_path!r} (it holds numbered versions: 1/, 2/).")
    batching = None
    if args.enable_batching:
        batching = (server_config.read_batching_parameters(args.batching_parameters_file)
                    if args.batching_parameters_file else server_config.BatchingParameters())
        for name in batching.ignored:
            print(f"note: {args.batching_parameters_file}: {name} is read and not applied "
                  f"(batches hold requests of one shape and bucket only).", file=sys.stderr)
    elif args.batching_parameters_file:
        print("note: --batching_parameters_file is read only with --enable_batching, as "
              "tensorflow_model_server reads it; batching is off.", file=sys.stderr)
    if args.port is not None:
        print(f"note: --port {args.port} is TensorFlow Serving's gRPC port; this server has "
              f"the REST API only (--rest_api_port {args.rest_api_port}).", file=sys.stderr)
    extra = {}
    if args.rest_api_num_threads is not None:
        extra["num_threads"] = args.rest_api_num_threads
    if args.monitoring_config_file:
        extra["metrics_path"] = server_config.read_monitoring_config(args.monitoring_config_file)
    return server_config.ServerOptions(
        models, host=args.rest_api_host, port=args.rest_api_port, batching=batching,
        poll_seconds=args.file_system_poll_wait_seconds,
        timeout_ms=args.rest_api_timeout_in_ms, max_body_bytes=args.rest_api_max_body_bytes,
        warmup=args.enable_model_warmup, xla_warmup_buckets=args.xla_warmup_buckets,
        log_requests=args.log_requests, intra_op_threads=args.tensorflow_intra_op_parallelism,
        inter_op_threads=args.tensorflow_inter_op_parallelism, **extra)
