"""Training on Multi30k de->en: length-bucketed batches vs fixed-length padding.

What is compared: one epoch of training on the same sentence pairs, the same
WordPiece vocabulary (learned once on de+en, cached), the same model
(N=2, d_model=128, h=4, d_ff=512, dropout 0.1, Adam, masked cross-entropy;
two copies with identical initial weights, no XLA) and the same
`tokens_per_batch=4096`, with the two batchings of
`training.pipeline.datasets.make_translation_dataset`:

    bucketed   the default: batches of similar length, each holding at most
               4096 positions (section 5.1 of the paper).
    padded     `pad_to_length=64`: 64 rows padded to 64 tokens, which is what
               the keras.io translation example does.  64 is the
               `max_sequence_length` of training/configs/multi30k.json; the
               longest tokenised sentence (59) fits, so nothing is cut, and
               both pipelines see exactly the same tokens.

Reported: real (non-pad) target tokens per second of training (labels != 0,
the tokens the loss counts), the padding fraction of each pipeline's
encoder+decoder inputs, and the speed-up (target >= 2x).  The epoch's
batches are built first (tf.data time is reported apart, not timed as
training) and trained on in R interleaved rounds: round r trains on the r-th
1/R of each epoch, alternating which pipeline goes first, so that both see
the same machine load; the speed-up is the ratio of real tokens/s over all
rounds.  By default every 4th batch of the epoch is trained on (a
systematic sample, so that a full Multi30k epoch fits in minutes on a 2-core
CPU; batches are shuffled across buckets, and the sample includes the
partial batches at the end); `--every 1` trains on the whole epoch.

Data: ../shared/data/multi30k/train.{de,en}.gz via
`training.data.readers.read_parallel`; the script exits with a message if
they are absent.  The vocabulary is learned on the first run (seconds)
on the whole training set and cached under benchmarks/.cache/bucketing/ (git-ignored).

    python3 benchmarks/bench_bucketing.py [--quick] [--pairs N]

`--quick` (a smoke test): the first 3000 pairs, every 2nd batch, a smaller
model (N=1, d_model=64, h=2, d_ff=256), 3 rounds.  Default: all 29,000
pairs, every 4th batch, 6 rounds.
"""

import os
import sys
import time

import common
import keras
import numpy as np

DATA = os.path.join(os.path.dirname(common.REPO_ROOT), "shared", "data", "multi30k")
CACHE = os.path.join(common.REPO_ROOT, "benchmarks", ".cache", "bucketing")
MAX_SEQUENCE_LENGTH = 64
TOKENS_PER_BATCH = 4096
MODEL = dict(num_layers=2, hidden_dim=128, num_heads=4, intermediate_dim=512,
             dropout=0.1, max_sequence_length=MAX_SEQUENCE_LENGTH)
QUICK_MODEL = dict(MODEL, num_layers=1, hidden_dim=64, num_heads=2, intermediate_dim=256)


def tokenizer_for(pairs, vocabulary_size=8000):
    """The shared de+en WordPiece tokenizer of the whole training set, cached.

    Learned on all of `pairs` (every mode passes the full training set, as a
    real run would), once; `lower_case=False` as training/configs/multi30k.json.
    """
    from training.text.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

    directory = os.path.join(CACHE, f"multi30k_wordpiece_{vocabulary_size}_train")
    if os.path.isfile(os.path.join(directory, "vocab.txt")):
        return WordPieceTokenizer.load(directory)
    print(f"learning a {vocabulary_size}-piece vocabulary (cached in {directory}) ...",
          flush=True)
    texts = list(pairs[0]) + list(pairs[1])
    vocabulary = learn_wordpiece_vocabulary(texts, vocabulary_size, lower_case=False)
    tokenizer = WordPieceTokenizer(vocabulary, lower_case=False)
    tokenizer.save(directory)
    return tokenizer


def epoch_batches(pairs, tokenizer, pad_to_length):
    """One shuffled epoch as a list of `(features, labels)` tensors."""
    from training.pipeline.datasets import make_translation_dataset

    dataset = make_translation_dataset(
        pairs[0], pairs[1], tokenizer, tokenizer, MAX_SEQUENCE_LENGTH,
        TOKENS_PER_BATCH, shuffle=True, seed=0, pad_to_length=pad_to_length,
    )
    start = time.perf_counter()
    batches = list(dataset)
    return batches, time.perf_counter() - start


def compiled_model(vocabulary_size, sizes):
    from keras_transformer.models import Transformer
    from training.optimization.losses import MaskedSparseCategoricalCrossentropy

    keras.utils.set_random_seed(0)
    model = Transformer(vocabulary_size=vocabulary_size, **sizes)
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=MaskedSparseCategoricalCrossentropy(), jit_compile=False)
    return model


def train_chunk(model, batches):
    for features, labels in batches:
        loss = model.train_on_batch(features, labels)
    return float(loss)


def main():
    args = common.parse_args(
        __doc__.splitlines()[0],
        lambda p: (
            p.add_argument("--pairs", type=int, default=None,
                           help="train on the first N pairs (default: all)"),
            p.add_argument("--every", type=int, default=None,
                           help="train on every K-th batch of the epoch (default 4; "
                                "1 trains the whole epoch)"),
        ),
    )
    info = common.machine_info()
    common.print_machine(info)
    paths = [os.path.join(DATA, f"train.{lang}.gz") for lang in ("de", "en")]
    if not all(os.path.isfile(p) for p in paths):
        print(f"SKIPPED: Multi30k not found ({paths[0]}, {paths[1]}); "
              "put train.de.gz and train.en.gz there to run this benchmark.")
        return 0
    from training.data.readers import read_parallel
    from training.pipeline.datasets import padding_fraction

    source, target = read_parallel(*paths)
    tokenizer = tokenizer_for((source, target))
    pairs_wanted = 3000 if args.quick else (args.pairs or len(source))
    pairs = (source[:pairs_wanted], target[:pairs_wanted])
    rounds = 3 if args.quick else 6
    every = args.every or (2 if args.quick else 4)
    sizes = QUICK_MODEL if args.quick else MODEL
    print(f"{len(pairs[0])} pairs, vocabulary {tokenizer.vocabulary_size}, "
          f"model {sizes}, tokens_per_batch {TOKENS_PER_BATCH}, {rounds} rounds, "
          f"training on every {every} batch(es) of the epoch", flush=True)

    names = ("bucketed", "padded")
    epochs, stats = {}, {}
    for name in names:
        batches, seconds = epoch_batches(pairs, tokenizer,
                                         None if name == "bucketed" else MAX_SEQUENCE_LENGTH)
        epochs[name] = batches
        real = [int(np.count_nonzero(labels.numpy())) for _, labels in batches]
        stats[name] = {"batches": len(batches), "real_target_tokens": sum(real),
                       "padding_fraction": padding_fraction(batches),
                       "pipeline_seconds": seconds, "real_per_batch": real}
        print(f"  {name}: {len(batches)} batches, {sum(real)} real target tokens, "
              f"padding {stats[name]['padding_fraction']:.1%}, tf.data {seconds:.1f} s",
              flush=True)
    assert stats["bucketed"]["real_target_tokens"] == stats["padded"]["real_target_tokens"]

    model_for = {name: compiled_model(tokenizer.vocabulary_size, sizes) for name in names}
    for name in names:  # tracing: the bucketed model retraces on new shapes
        shapes, warm = set(), []
        for features, labels in epochs[name]:
            shape = tuple(features["decoder_token_ids"].shape)
            if shape not in shapes and len(warm) < 3:
                shapes.add(shape)
                warm.append((features, labels))
        seconds = common.timed(lambda m=model_for[name], w=warm: train_chunk(m, w))
        print(f"  warm-up {name}: {seconds:.1f} s", flush=True)

    def chunk(name, r):  # the r-th 1/rounds of the epoch, every `every`-th batch
        n = len(epochs[name])
        return epochs[name][r * n // rounds:(r + 1) * n // rounds][::every]

    seconds = {name: [] for name in names}
    tokens_per_s = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            batches = chunk(name, r)
            t = common.timed(lambda m=model_for[name], b=batches: train_chunk(m, b))
            real = sum(int(np.count_nonzero(labels.numpy())) for _, labels in batches)
            seconds[name].append(t)
            tokens_per_s[name].append(real / t)
        print(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{n} {seconds[n][-1]:.1f} s ({tokens_per_s[n][-1]:.0f} tok/s)" for n in names),
            flush=True)

    result = {"machine": info, "quick": args.quick, "pairs": len(pairs[0]),
              "every": every, "vocabulary_size": tokenizer.vocabulary_size, "model": sizes,
              "tokens_per_batch": TOKENS_PER_BATCH, "rounds": rounds, "pipelines": {}}
    for name in names:
        trained = sum(sum(int(np.count_nonzero(y.numpy())) for _, y in chunk(name, r))
                      for r in range(rounds))
        epoch_seconds = sum(seconds[name]) * stats[name]["real_target_tokens"] / trained
        s = dict(stats[name], trained_real_target_tokens=trained,
                 epoch_seconds=epoch_seconds,
                 real_target_tokens_per_s=trained / sum(seconds[name]),
                 per_round_tokens_per_s=common.summarize(tokens_per_s[name]))
        s.pop("real_per_batch")
        result["pipelines"][name] = s
        print(f"  {name:8s} epoch {epoch_seconds:7.1f} s (projected), "
              f"{s['real_target_tokens_per_s']:.0f} real target tok/s; per round "
              f"{common.fmt(s['per_round_tokens_per_s'], unit='tok/s', digits=0)}; "
              f"padding {s['padding_fraction']:.1%}")
    speed_up = (result["pipelines"]["bucketed"]["real_target_tokens_per_s"]
                / result["pipelines"]["padded"]["real_target_tokens_per_s"])
    paired = common.summarize(  # bucketed / padded tokens/s, round by round
        [b / p for b, p in zip(tokens_per_s["bucketed"], tokens_per_s["padded"], strict=True)])
    result["speed_up"] = speed_up
    result["per_round_speed_up"] = paired
    result["target"] = {"value": 2.0, "met": speed_up >= 2.0}
    print(f"bucketed / padded real-token throughput: {speed_up:.2f}x "
          f"(per round {common.fmt(paired, unit='x', digits=2)}); target 2x: "
          f"{'met' if speed_up >= 2.0 else 'MISSED'}")
    common.append_result("bucketing", result, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
