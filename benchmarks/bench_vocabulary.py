"""Seconds to learn the Multi30k word-piece vocabulary (target: <= 10 s).

What is timed: `training.text.tokenizers.learn_wordpiece_vocabulary` on the
29,000 German and 29,000 English training sentences together, as the
multi30k preset learns them (training/configs/multi30k.json: one joint
vocabulary of 8,000 pieces, `lower_case=false`), from a list of strings to
the list of pieces: `normalize_text` in TF, then the Hugging Face WordPiece
trainer. Each round is one call; reported are the median and range of the
wall-clock seconds and the process CPU seconds of the rounds (CPU seconds
include the trainer's threads; on a machine shared with other jobs the wall
time also holds the time spent waiting for a core).

`--old N` also times the learner this one replaced, tensorflow-text's
`bert_vocab_from_dataset` (as training/text/tokenizers.py called it before), and
the new learner, on the first N sentences of each language, for a
like-for-like ratio: the old learner took 78 s (English) + 349 s (German)
on the whole corpus, so it is not run on all of it.

Data: ../shared/data/multi30k/train.{de,en}.gz (the script exits with a
message if they are absent).

    python3 benchmarks/bench_vocabulary.py [--quick] [--rounds R] [--old N]

`--quick`: one round, nothing stored. Appends its run to benchmarks/results/vocabulary.json.
"""

import os
import statistics
import sys
import time

import common

DATA = os.path.join(os.path.dirname(common.REPO_ROOT), "shared", "data", "multi30k")
VOCABULARY_SIZE = 8000  # training/configs/multi30k.json
LOWER_CASE = False


def learn_old(texts, vocabulary_size, lower_case):
    """The replaced learner: tensorflow-text's BERT vocabulary learner."""
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

    from training.text.tokenizers import RESERVED_TOKENS, normalize_text

    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(texts, tf.string))
    dataset = dataset.batch(1024).map(lambda s: normalize_text(s, lower_case))
    return bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocabulary_size,
        reserved_tokens=list(RESERVED_TOKENS),
        bert_tokenizer_params={"lower_case": False},
        # What training/train.py passed below 20,000 sentences.
        learn_params={"lower_thresh": 2} if len(texts) < 20000 else {},
    )


def timed_rounds(learn, rounds):
    """(vocabulary, wall seconds, CPU seconds) of `rounds` calls of `learn`."""
    walls, cpus = [], []
    for r in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        vocabulary = learn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        print(f"  round {r + 1}/{rounds}: {walls[-1]:.2f} s wall, {cpus[-1]:.2f} s CPU",
              flush=True)
    return vocabulary, walls, cpus


def summary(walls, cpus):
    return {"wall_seconds": common.summarize(walls), "cpu_seconds": common.summarize(cpus)}


def main():
    def extra(parser):
        parser.add_argument("--rounds", type=int, default=5, help="timed calls")
        parser.add_argument("--old", type=int, default=0, metavar="N",
                            help="also time the old learner on N sentences a language")

    args = common.parse_args(__doc__.splitlines()[0], extra)
    paths = [os.path.join(DATA, f"train.{lang}.gz") for lang in ("de", "en")]
    if not all(os.path.isfile(p) for p in paths):
        sys.exit(f"Multi30k training files not found under {DATA}")
    from training.data.readers import read_lines
    from training.text.tokenizers import learn_wordpiece_vocabulary

    info = common.machine_info()
    common.print_machine(info)
    german, english = (read_lines(p) for p in paths)
    texts = german + english
    rounds = 1 if args.quick else args.rounds
    print(f"learning {VOCABULARY_SIZE} pieces from {len(texts)} sentences (de+en), "
          f"lower_case={LOWER_CASE}, {rounds} rounds", flush=True)
    vocabulary, walls, cpus = timed_rounds(
        lambda: learn_wordpiece_vocabulary(texts, VOCABULARY_SIZE, lower_case=LOWER_CASE),
        rounds,
    )
    print(f"Multi30k de+en, {len(vocabulary)} pieces: median {statistics.median(walls):.2f} s "
          f"wall (range {min(walls):.2f}-{max(walls):.2f}), "
          f"{statistics.median(cpus):.2f} s CPU; target <= 10 s", flush=True)
    report = {"machine": info, "sentences": len(texts), "vocabulary_size": VOCABULARY_SIZE,
              "lower_case": LOWER_CASE, "pieces": len(vocabulary),
              "new_full_corpus": summary(walls, cpus)}

    if args.old:
        sample = german[: args.old] + english[: args.old]
        print(f"old vs new learner on {len(sample)} sentences (de+en), one round each",
              flush=True)
        _, old_walls, old_cpus = timed_rounds(
            lambda: learn_old(sample, VOCABULARY_SIZE, LOWER_CASE), 1)
        _, new_walls, new_cpus = timed_rounds(
            lambda: learn_wordpiece_vocabulary(sample, VOCABULARY_SIZE, lower_case=LOWER_CASE),
            1,
        )
        print(f"sample of {len(sample)}: old {old_walls[0]:.2f} s, new {new_walls[0]:.2f} s "
              f"wall ({old_walls[0] / new_walls[0]:.0f}x)", flush=True)
        report["sample"] = {"sentences": len(sample),
                            "old": summary(old_walls, old_cpus),
                            "new": summary(new_walls, new_cpus)}
    common.append_result("vocabulary", report, args)


if __name__ == "__main__":
    main()
