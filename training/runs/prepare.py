"""`python -m training prepare`: tokenize a training corpus once, into shards.

The vocabulary is learned exactly as `train` learns it for a streamed
corpus (the same seeded sample of the files' heads, the same config), and
the training examples of the stream's first pass are written tokenized
(`training.pipeline.prepared`).  A run given `--set prepared_dir=DIR`
then reads those shards instead of tokenizing its text on the fly.
"""

import os
import tempfile

from training.pipeline import prepared
from training.tasks import get_task


def prepare_corpus(config, output, num_shards=8, overwrite=False):
    """Writes the prepared corpus of `config`'s `train_files` to `output`.

    Args:
        config: The run's config (`dataset="files"`, a translation or text
            classification task); `in_memory_limit_mb` and `prepared_dir`
            are ignored (the corpus is always read as a stream).
        output: The folder to write (written whole or not at all).
        num_shards: TFRecord files to spread the examples over.
        overwrite: Replace an existing `output` that is a prepared corpus;
            any other file or folder is refused.

    Returns:
        The manifest written (`prepared.json`).
    """
    task = get_task(config.task)
    if config.dataset != "files" or not hasattr(task, "prepared_records"):
        raise ValueError(
            "prepare tokenizes the train_files of dataset='files' for task translation or "
            f"classification; received task={config.task!r}, dataset={config.dataset!r}.")
    if not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"--shards must be a positive integer; received {num_shards!r}.")
    if os.path.lexists(output) and not overwrite:
        raise FileExistsError(f"--output {os.fspath(output)!r} already exists; pass "
                              "--overwrite to replace it.")
    if os.path.lexists(output) and not prepared.is_prepared_corpus(output):
        raise FileExistsError(
            f"--output {os.fspath(output)!r} exists and is not a prepared corpus (no "
            f"{prepared.MANIFEST}); --overwrite replaces only that, and nothing was changed: "
            "choose another --output.")
    config = config.replace(in_memory_limit_mb=0, prepared_dir="")
    with tempfile.TemporaryDirectory() as scratch:
        data = task.load_data(config, scratch)
        task.check_data(config, data)
        config = task.resolve_config(config, data)
        task.prepare(config, data, scratch, write=False)
    corpus = data.train
    settings = task.prepared_settings(config, corpus, task.label_names)
    manifest = prepared.corpus_manifest(corpus, task.tokenizer, settings)
    records = task.prepared_records(config, corpus)
    return prepared.write_prepared(output, records, manifest, task.tokenizer, num_shards,
                                   overwrite)
