"""Which TensorFlow Serving builds can load our SavedModels: their op types.

A SavedModel loads in a server only if every op type in its graph, the
functions of its `tf.function`s included, is registered there. The stock
`tensorflow/serving` image links TensorFlow core and, for text models, an
older TF Text: 2.12.1 (the serving project's own request to update it for
2.18.1 names that release). Ops that TF Text added later fail there with
"Op type not registered".

`op_types(saved_model_dir)` lists a SavedModel's op types;
`check_serving_ops(op_types, text_ops)` splits them into TF core ops, the
ops that TF Text release provides, and the rest (which the stock server
lacks). The TF Text release's ops are read from its wheel's op libraries by
`python3 -m export.serving_ops extract <wheel>`, which writes
`export/serving_ops/tensorflow_text-<version>.json` (the wheel's name and
sha256, and per op library the op names found in it); nothing there is
typed by hand.

Reading op names out of a compiled library: an op is registered with a
string literal of its name (`REGISTER_OP("WordpieceTokenizeWithOffsets")`),
and TF Text's newer "shim" kernels carry it in their C++ class names
(`FastWordpieceTokenizeWithOffsetsOp`). `extract` looks for every op name
TF Text registers today (the installed package, `text_op_names`) as bytes of
each library, ending at a byte that cannot continue a name or at an `Op`
class suffix, so that `NormalizeUTF8` is not found inside
`NormalizeUTF8WithOffsets`.
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile

import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.client import pywrap_tf_session as c_api

OPS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serving_ops")
#: The TF Text release linked into the stock TensorFlow Serving image.
SERVING_TEXT_VERSION = "2.12.1"


def read_saved_model(saved_model_dir):
    """The `SavedModel` protocol buffer of a directory's `saved_model.pb`."""
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
        return saved_model_pb2.SavedModel.FromString(f.read())


def op_types(saved_model_dir):
    """Every op type in the SavedModel's graph and its function library."""
    ops = set()
    for meta_graph in read_saved_model(saved_model_dir).meta_graphs:
        graph = meta_graph.graph_def
        ops.update(node.op for node in graph.node)
        for function in graph.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


def core_op_names():
    """Op types of TensorFlow core: those with a `tf.raw_ops` wrapper.

    Loaded op libraries (TF Text's) add to the op registry but not to
    `tf.raw_ops`, which is generated when TensorFlow is built.
    """
    return {name for name in dir(tf.raw_ops) if not name.startswith("_")}


def _registered_ops():
    buffer = c_api.TF_GetAllOpList()
    try:
        registered = op_def_pb2.OpList.FromString(c_api.TF_GetBuffer(buffer))
    finally:
        c_api.TF_DeleteBuffer(buffer)
    return {op.name for op in registered.op}


_REGISTERED_BY_TENSORFLOW = (
    "import sys, tensorflow\n"
    "from export.serving_ops import _registered_ops\n"
    "assert 'tensorflow_text' not in sys.modules\n"
    "print('\\n'.join(sorted(_registered_ops())))\n"
)


def text_op_names():
    """Op types the installed TF Text registers.

    The op registry after importing `tensorflow_text`, less the registry of
    a fresh process that imports TensorFlow alone.
    """
    # Imported here, not with the module: that fresh process imports this
    # module, and its registry must be TensorFlow's alone.
    import tensorflow_text  # noqa: F401  Loads its op libraries.

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    alone = subprocess.run(
        [sys.executable, "-c", _REGISTERED_BY_TENSORFLOW], cwd=root, env=env,
        capture_output=True, text=True, check=True,
    ).stdout.split()
    return _registered_ops() - set(alone)


def _names_in_library(data, candidates):
    found = set()
    for name in candidates:
        encoded = name.encode()
        for match in re.finditer(re.escape(encoded), data):
            after = data[match.end():match.end() + 2]
            if not after or not re.match(rb"[A-Za-z0-9_]", after[:1]) or after == b"Op":
                found.add(name)
                break
    return found


def extract(wheel_path, candidates):
    """{"wheel", "sha256", "libraries": {library: [op names]}} of a TF Text wheel."""
    with open(wheel_path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    libraries = {}
    with zipfile.ZipFile(wheel_path) as wheel:
        for member in sorted(wheel.namelist()):
            # Op libraries only: core/pybinds/ holds TFLite and model-builder
            # bindings, which name ops without registering them in TF.
            if member.endswith(".so") and "/pybinds/" not in member:
                names = _names_in_library(wheel.read(member), candidates)
                if names:
                    libraries[member] = sorted(names)
    return {"wheel": os.path.basename(wheel_path), "sha256": digest, "libraries": libraries}


def ops_file(version=SERVING_TEXT_VERSION):
    return os.path.join(OPS_DIR, f"tensorflow_text-{version}.json")


def load_text_ops(version=SERVING_TEXT_VERSION):
    """The op names `extract` found in that TF Text release's wheel."""
    path = ops_file(version)
    if not os.path.isfile(path):
        raise ValueError(
            f"No op list for tensorflow-text {version}: {path} is missing; run "
            f"`python3 -m export.serving_ops extract <tensorflow_text-{version} wheel>`."
        )
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    return {name for names in record["libraries"].values() for name in names}


def check_serving_ops(ops, text_ops, core_ops=None):
    """(core ops, TF Text ops, ops the server lacks) of the op types `ops`."""
    core_ops = core_op_names() if core_ops is None else core_ops
    ops = set(ops)
    core = ops & core_ops
    text = (ops - core) & text_ops
    return core, text, ops - core - text


def _main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m export.serving_ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="write the op list of a tensorflow-text wheel")
    ex.add_argument("wheel")
    check = sub.add_parser("check", help="list a SavedModel's ops the stock server lacks")
    check.add_argument("saved_model")
    args = parser.parse_args(argv)
    if args.command == "extract":
        match = re.match(r"tensorflow_text-([0-9.]+)-", os.path.basename(args.wheel))
        if not match:
            parser.error(f"not a tensorflow_text wheel: {args.wheel!r}")
        record = extract(args.wheel, text_op_names())
        os.makedirs(OPS_DIR, exist_ok=True)
        with open(ops_file(match.group(1)), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.write("\n")
        print(ops_file(match.group(1)))
        return 0
    core, text, missing = check_serving_ops(op_types(args.saved_model), load_text_ops())
    print(f"{len(core)} TF core ops, TF Text {SERVING_TEXT_VERSION} ops: {sorted(text)}")
    if missing:
        print(f"error: not in TF core or TF Text {SERVING_TEXT_VERSION}: {sorted(missing)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
