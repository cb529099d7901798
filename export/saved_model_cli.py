"""Run TensorFlow's `saved_model_cli run` on an export and parse what it prints.

`saved_model_cli` loads the graph in a TF1 session and only knows the ops
linked into TensorFlow; the tokenizer's tensorflow-text ops
(`FastBertNormalize`, `FastWordpieceTokenizeWithOffsets`, ...) are registered
by importing `tensorflow_text`. Plain `saved_model_cli run` therefore fails
with "Op type not registered 'NormalizeUTF8'", so the tool's own `main`
is started from a `python3 -I -c` that imports `tensorflow_text` first; the
command line is otherwise exactly `saved_model_cli run --dir ... --tag_set
serve --signature_def ... --input_exprs ... --inputs ...`: strings travel as
Python literals (`--input_exprs`), numbers as `.npy` files (`--inputs`),
which keep NaN (a series' padding and missing values) and every float32
bit; a literal would carry neither.
"""

import ast
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

_LAUNCHER = (
    "import sys\n"
    "import tensorflow_text  # registers the tokenizer ops\n"
    "from tensorflow.python.tools.saved_model_cli import main\n"
    "sys.argv[0] = 'saved_model_cli'\n"
    "sys.exit(main())\n"
)
# One argv string may not exceed MAX_ARG_STRLEN (128 KiB on Linux).
_MAX_EXPRESSION_BYTES = 100_000
_SECTION = re.compile(
    r"^Result for output key (\S+):\n(.*?)(?=^Result for output key |^Output \S+ is saved|\Z)",
    re.M | re.S,
)
_BYTES_LITERAL = re.compile(r"""b'(?:[^'\\]|\\.)*'|b"(?:[^"\\]|\\.)*\"""")
_NUMBER = re.compile(r"-?(?:nan|inf|\d+\.?\d*(?:e[-+]?\d+)?)")


def _bytes_literal(value):
    """Any bytes/str as a Python bytes literal of `\\xNN` escapes only.

    Nothing in it can end the `--input_exprs` value early: saved_model_cli
    splits inputs on ";" and keys on "=".
    """
    if isinstance(value, str):
        value = value.encode("utf-8")
    return "b'" + "".join(f"\\x{byte:02x}" for byte in value) + "'"


def _literal(array):
    array = np.asarray(array)
    if array.dtype.kind in "OSU":
        if array.ndim != 1:
            raise ValueError(
                f"Only 1-D string inputs are supported; received shape {array.shape}."
            )
        return "[" + ", ".join(_bytes_literal(v) for v in array.tolist()) + "]"
    return repr(array.tolist())


def input_exprs(inputs):
    """{key: array} -> the `--input_exprs` value `key=<python literal>;...`."""
    expression = ";".join(f"{key}={_literal(value)}" for key, value in inputs.items())
    if len(expression.encode("utf-8")) > _MAX_EXPRESSION_BYTES:
        raise ValueError(
            f"--input_exprs would be {len(expression)} characters, more than one command "
            "line argument may hold; pass fewer or shorter examples."
        )
    return expression


def _number_literal(match):
    token = match.group()
    return {"nan": "None", "-nan": "None", "inf": "1e999", "-inf": "-1e999"}.get(
        token, token
    )


def parse_printed_array(text):
    """Parses NumPy's printout of an array, as saved_model_cli prints it.

    Args:
        text: E.g. `[b'ein hund' b'']` or `[[0.1 0.9]\\n [0.3 0.7]]`.

    Returns:
        A NumPy array: an object array of bytes for strings, float64 for
        numbers (NaN where NumPy printed nan).

    Raises:
        ValueError: If NumPy summarised the array with "...".
    """
    text = text.strip()
    strings = _BYTES_LITERAL.findall(text)
    if strings:
        array = np.empty(len(strings), dtype=object)
        array[:] = [ast.literal_eval(s) for s in strings]
        return array
    if "..." in text:
        raise ValueError(
            "saved_model_cli summarised the output with '...'; use fewer examples."
        )
    literal = _NUMBER.sub(_number_literal, text)
    literal = re.sub(
        r"(?<=[\w.\]])\s+(?=[-\w\[])", ", ", literal
    )  # "[1 2]" -> "[1, 2]"
    return np.array(ast.literal_eval(literal), dtype=np.float64)


def parse_output(stdout):
    """{output key: array} from the "Result for output key K:" sections."""
    return {key: parse_printed_array(body) for key, body in _SECTION.findall(stdout)}


def run_saved_model_cli(
    saved_model_dir, inputs, signature="serving_default", timeout=600
):
    """Runs `saved_model_cli run` on `inputs` ({key: array}) and parses it.

    Args:
        saved_model_dir: The SavedModel directory.
        inputs: {signature input key: NumPy array}; 1-D for strings, which
            travel on the command line, so keep them small (< 100 kB).
        signature: Signature name (`--signature_def`).
        timeout: Seconds before the command is killed.

    Returns:
        {output key: NumPy array} (numbers are as printed: 8 significant
        digits).

    Raises:
        RuntimeError: If the command fails or prints no result.
    """
    strings = {k: v for k, v in inputs.items() if np.asarray(v).dtype.kind in "OSU"}
    with tempfile.TemporaryDirectory() as scratch:
        files = []
        for key, value in inputs.items():
            if key not in strings:
                path = os.path.join(scratch, f"input_{len(files)}.npy")
                np.save(path, np.asarray(value))
                files.append(f"{key}={path}")
        command = [
            sys.executable, "-I", "-c", _LAUNCHER, "run",
            "--dir", os.path.abspath(saved_model_dir),
            "--tag_set", "serve",
            "--signature_def", signature,
        ]  # fmt: skip
        if strings:
            command += ["--input_exprs", input_exprs(strings)]
        if files:
            command += ["--inputs", ";".join(files)]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        )
    outputs = parse_output(result.stdout)
    if result.returncode != 0 or not outputs:
        raise RuntimeError(
            f"saved_model_cli run failed ({result.returncode}):\n{result.stdout[-2000:]}\n"
            f"{result.stderr[-4000:]}"
        )
    return outputs
