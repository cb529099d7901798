"""Packaging for keras-transformer.

TensorFlow and tensorflow-text are pinned to the same minor release: the
tensorflow-text wheels are built against one TensorFlow ABI and fail to load
beside any other (a frequent complaint of the peers' users).
"""

import pathlib

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent

setup(
    name="keras-transformer",
    version="0.1.0",
    description=(
        "The Transformer of 'Attention Is All You Need' for Keras 3: "
        "layers, training, decoding and export."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.14",
    packages=find_packages(include=["keras_transformer*", "training*", "export*", "cli*"]),
    package_data={"training": ["configs/*.json"], "export": ["server/page.html"]},
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "tensorflow-text>=2.21,<2.22",
        # Learns word-piece vocabularies (training/text/tokenizers.py); the graph
        # tokenizer and exported SavedModels use tensorflow-text only.
        "tokenizers>=0.20,<1",
        "keras>=3.10,<4",
        "tensorboard>=2.21,<2.22",
        "sacrebleu>=2.4,<3",
        # TensorBoard's attention heatmaps (training/monitor/attention_plot.py).
        "matplotlib>=3.8",
        "ai-edge-litert>=2.0,<3",
        "numpy>=1.26",
    ],
    extras_require={
        "dev": [
            "pytest>=8,<10",
            # The README's test command runs the suite on two workers (-n 2).
            "pytest-xdist>=3.5,<4",
            "ruff>=0.6",
            "nbclient>=0.10,<1",
            "nbformat>=5.9,<6",
            "ipykernel>=6",
            "scikit-learn>=1.4",
            # tests/test_tokenizers.py trains a SentencePiece model for our wrapper
            # of tensorflow-text's op (SentencePieceTokenizer).
            "sentencepiece>=0.2",
            # tests/test_jax_backend.py: the modeling library on Keras' JAX
            # backend (CPU), in a subprocess.
            "jax>=0.10,<0.12",
            # tests/test_server_*.py: the serve extra, and httpx as their client.
            "starlette>=0.40", "uvicorn>=0.30", "prometheus-client>=0.20", "httpx>=0.27",
        ],
        "bench": [
            "keras-hub>=0.32,<0.33",
            # benchmarks/write_uea_ts.py: the UEA sets sktime ships, as .ts files;
            # benchmarks/bench_series_recipe.py: MiniRocket (which needs numba).
            "sktime>=0.30",
            "numba>=0.59",
            # benchmarks/bench_series_recipe.py: MultiRocket (MultiRocketClassifier).
            "aeon>=1.0",
        ],
        # training/estimator.py: SeriesClassifier, the series recipe as a
        # scikit-learn estimator (clone, GridSearchCV).
        "sklearn": ["scikit-learn>=1.4"],
        # python -m export ctranslate2 (export/ctranslate2.py): OpenNMT's C++
        # inference engine, imported only there.
        "ctranslate2": ["ctranslate2>=4.5,<5"],
        # python -m export serve (export/server/): TensorFlow Serving's REST API
        # as an ASGI application on uvicorn, with Prometheus metrics; imported
        # only when a server starts.  httpx: the tests' and the benchmark's client.
        "serve": ["starlette>=0.40", "uvicorn>=0.30", "prometheus-client>=0.20",
                  "httpx>=0.27"],
    },
    entry_points={
        "console_scripts": [
            "keras-transformer-train=cli.training_commands:main",
            "keras-transformer-export=cli.export_commands:main",
        ]
    },
)
