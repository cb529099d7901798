"""Translation: parallel sentences -> a seq2seq `Transformer`, scored by BLEU."""

import dataclasses
import math
import os
import time
import warnings

import numpy as np
import tensorflow as tf

from keras_transformer.models import Transformer
from training.data import readers, shards, toy
from training.data.common import TaskData, require_file, resolve_data_dir
from training.monitor.evaluation import (
    DECODE_BATCH,
    bleu_scores,
    corpus_bleu,
)
from training.monitor.tensorboard import (
    AttentionImages,
    ValidationBleu,
    attention_example,
)
from training.optimization.losses import (
    MaskedAccuracy,
    MaskedPerplexity,
    MaskedSparseCategoricalCrossentropy,
)
from training.pipeline import datasets, prepared, streaming
from training.recipe import budget
from training.recipe.plan import EvaluationPlan, FinalEvaluation
from training.serving.task_serving import TranslationServing
from training.tasks.base import Task
from training.tasks.common import (
    learn_or_load_tokenizer,
    preset_config,
    stream_options,
    training_rows,
)
from training.tasks.options import TranslationOptions

#: Four beams cost about this many times a greedy decode of the same
#: sentences, both loops traced (1,000 Multi30k test sentences on a 2-core
#: CPU: 23.9 s against 7.2 s for a trained d_model 256 model; 2.5-3.2x for
#: the 2+2- and 3+3-layer models of ten-minute runs).
BEAM_OVER_GREEDY = 3.3

#: Without `valid_files`, one training pair in HOLD_OUT_EVERY validates (and
#: tests, without `test_files`), at most HOLD_OUT_MAX pairs; a corpus of fewer
#: than HOLD_OUT_MIN_PAIRS pairs validates on its training pairs.
HOLD_OUT_EVERY, HOLD_OUT_MAX, HOLD_OUT_MIN_PAIRS = 50, 1000, 100


def held_out_pairs(pairs):
    """(train, valid) of line-aligned `(sources, targets)`: every 50th pair held out.

    Validation on pairs the model trains on measures memorisation, so model
    selection and early stopping cannot use it.  Every `HOLD_OUT_EVERY`-th
    pair from the first (more apart once that exceeds `HOLD_OUT_MAX` pairs)
    validates instead and no longer trains.  Below `HOLD_OUT_MIN_PAIRS`
    pairs nothing is held out: both splits are the training pairs.
    """
    sources, targets = (list(side) for side in pairs)
    count = len(sources)
    if count < HOLD_OUT_MIN_PAIRS:
        return (sources, targets), (list(sources), list(targets))
    every = max(HOLD_OUT_EVERY, math.ceil(count / HOLD_OUT_MAX))

    def part(held):
        return tuple([x for i, x in enumerate(side) if (i % every == 0) == held]
                     for side in (sources, targets))

    return part(False), part(True)


def final_length_share(tokenizer, hypotheses, references, floor=0.5):
    """How much of today's decoding time a trained model would need.

    Greedy and beam search run until every sentence in a batch has ended,
    so a model that has not learned to stop decodes to the length limit: a
    Multi30k model after one epoch of a 10-minute run wrote 20 pieces a
    sentence where the references have 15, and took 1.9x as long on the
    test set as the same model one epoch later.  The share is the
    references' pieces over the hypotheses' (at most 1), never below
    `floor`: the run may end with a model that still runs on.
    """
    def count(texts):
        return int(tokenizer.tokenize(tf.constant(list(texts), tf.string)).row_lengths().numpy().sum())

    written = count(hypotheses)
    if not written:
        return 1.0
    return float(min(1.0, max(floor, count(references) / written)))


@dataclasses.dataclass(frozen=True)
class TranslationEvaluationPlan(EvaluationPlan):
    """What a budgeted translation run decided about its test, and the
    decoding loops' trace times it measured once (seconds)."""

    test_beam: bool  # the test runs the beam search (else greedy BLEU only)
    seconds_decoding_trace: float  # the greedy loop's first trace
    seconds_beam_trace: float | None = None  # the beam loop's (None: not traced then)


class Translation(Task):
    """Source sentence -> target sentence, one shared word-piece vocabulary.

    Data: `dataset="toy"` (generated number words), `"multi30k"`
    (`source_language` -> `target_language`) or `"files"` (`train_files`
    etc. as (source, target) pairs of line-aligned files; without
    `valid_files`, `held_out_pairs` validates on one training pair in 50).
    Selection:
    greedy BLEU of `eval_sentences` validation sentences, or minus the
    validation loss when that is 0.  Test: cased sacreBLEU (and lowercased
    tokenized BLEU) of greedy and, with `beam_size > 1`, beam search.
    """

    name = "translation"
    datasets = ("toy", "multi30k", "files")
    #: Paths each files field holds where it is given (`TrainingConfig.validate`):
    #: (source, target), each a file or a glob pattern of shards.
    file_counts = {"train_files": (2,), "valid_files": (2,), "test_files": (2,)}
    options = TranslationOptions

    def __init__(self, tokenizer=None, label_names=None):
        super().__init__(tokenizer, label_names)
        self._serving = None

    def recipe_defaults(self):
        return {"weight_decay": 1e-4}  # fairseq's IWSLT de-en recipe

    # --- data -------------------------------------------------------------------

    def load_data(self, config, run_dir):
        if config.dataset == "toy":
            paths = toy.write_toy_corpus(
                os.path.join(run_dir, "data"), config.toy_train_size,
                config.toy_eval_size, config.toy_eval_size, seed=config.seed,
            )
            splits = [paths["train"], paths["valid"], paths["test"]]
        elif config.dataset == "multi30k":
            folder = resolve_data_dir(config.data_dir) / "multi30k"
            src, tgt = config.source_language, config.target_language
            splits = [
                (folder / f"{name}.{src}.gz", folder / f"{name}.{tgt}.gz")
                for name in ("train", "val", "test_2016_flickr")
            ]
        elif config.dataset == "files":
            splits = [config.train_files, config.valid_files or None,
                      config.test_files or None]
        else:
            raise ValueError(
                f"dataset={config.dataset!r} is not a translation dataset; use toy, multi30k or files."
            )
        read, summary = [], None
        for name, pair in zip(("train", "valid", "test"), splits, strict=True):
            if name == "valid" and len(read) == 2:  # held out of a streamed corpus
                continue
            if pair is None:
                read.append(None)
                continue
            if len(pair) != 2:
                raise ValueError(f"{name}_files must be (source, target); received {pair!r}.")
            if config.dataset == "files" and name == "train":
                columns, streamed = shards.stream_or_read(pair, name, config.in_memory_limit_mb)
                if streamed or config.prepared_dir:
                    corpus, held = self._streamed(config, columns, hold_out=splits[1] is None)
                    if config.prepared_dir:
                        corpus = prepared.open_prepared(
                            config.prepared_dir, corpus, self.prepared_settings(config, corpus))
                    read.append(corpus)
                    summary = corpus.describe(config.in_memory_limit_mb)
                    if held is not None:
                        read.append(held)
                    continue
                pairs = [readers.read_parallel(s, t, encoding=config.encoding)
                         for s, t in zip(*columns, strict=True)]
                read.append(tuple(sum((list(p[side]) for p in pairs), []) for side in (0, 1)))
                summary = shards.in_memory_line(len(read[0][0]), shards.total_bytes(columns),
                                                config.in_memory_limit_mb)
                continue
            source, target = (require_file(p, f"{name} file") for p in pair)
            read.append(readers.read_parallel(source, target, encoding=config.encoding))
        if read[1] is None:  # files without valid_files
            read[0], read[1] = held_out_pairs(read[0])
        if read[2] is None:  # without test_files, the validation pairs test
            read[2] = read[1]
        return TaskData(*read, summary=summary)

    @staticmethod
    def _streamed(config, columns, hold_out):
        """(`StreamedCorpus` of the training shards, held-out pairs or None).

        Without validation files, one pair in `HOLD_OUT_EVERY` of the first
        shard's head validates (at most `HOLD_OUT_MAX`), and the stream
        leaves it out; a corpus of fewer than `HOLD_OUT_MIN_PAIRS` pairs
        validates on its sample.
        """
        corpus, held = shards.streamed_corpus(
            columns, config.vocabulary_sample_lines, config.seed, config.encoding,
            hold_out=(HOLD_OUT_EVERY, HOLD_OUT_MAX) if hold_out else None,
        )
        if hold_out and corpus.num_examples + len(held[0]) < HOLD_OUT_MIN_PAIRS:
            corpus, _ = shards.streamed_corpus(
                columns, config.vocabulary_sample_lines, config.seed, config.encoding)
            held = tuple(list(side) for side in corpus.sample)
        return corpus, held

    @staticmethod
    def prepared_settings(config, corpus, label_names=None):
        """What a prepared corpus (`training.pipeline.prepared`) must share with a run."""
        return {"task": "translation", "max_sequence_length": config.max_sequence_length,
                "encoding": config.encoding, "held_out": list(corpus.held_out)}

    def prepared_records(self, config, corpus):
        """The tokenized records `python -m training prepare` writes of `corpus`."""
        return prepared.translation_records(corpus, self.tokenizer, config.max_sequence_length,
                                            stream_options(config, corpus))

    def prepare(self, config, data, run_dir, write=True):
        super().prepare(config, data, run_dir, write)
        pairs = training_rows(data.train)
        pairs = shards.seeded_sample(pairs, config.vocabulary_sample_lines, config.seed)
        texts = [source for source, _ in pairs] + [target for _, target in pairs]
        self.tokenizer = learn_or_load_tokenizer(config, run_dir, texts, write)

    def make_dataset(self, config, split, shuffle=False, repeat=False, training=False):
        static = {}
        if config.jit_compile:
            # XLA compiles once per shape: a few coarse buckets, each batch
            # padded to its bucket's length, and the training stream drops
            # incomplete batches, so that each bucket has one shape.
            static = dict(pad_to_bucket_boundary=True, boundaries=self._boundaries(config),
                          drop_remainder=training)
        if isinstance(split, prepared.PreparedCorpus):
            split.check_tokenizer(self.tokenizer)
            batching = {"tokens_per_batch": config.tokens_per_batch, **static}
            stream = prepared.translation_stream(
                split, config.max_sequence_length, batching, stream_options(config, split),
                repeat=repeat, passes=split.pass_lengths,
            )
            stream.pass_size = prepared.translation_pass_size(
                split.manifest, config.max_sequence_length, **batching)
            return stream
        if isinstance(split, shards.StreamedCorpus):
            datasets.check_translation_sizes(config.max_sequence_length,
                                             config.tokens_per_batch, None)
            return streaming.make_translation_stream(
                (split.columns, split.compressions), (self.tokenizer, self.tokenizer),
                config.max_sequence_length, {"tokens_per_batch": config.tokens_per_batch,
                                             **static},
                stream_options(config, split), repeat=repeat, passes=split.pass_lengths,
            )
        return datasets.make_translation_dataset(
            split[0], split[1], self.tokenizer, self.tokenizer, config.max_sequence_length,
            config.tokens_per_batch, seed=config.seed, shuffle=shuffle, repeat=repeat,
            **static,
        )

    @staticmethod
    def _boundaries(config):
        return datasets.bucket_boundaries(config.max_sequence_length, min_length=16, growth=1.5)

    def training_shapes(self, config):
        return len(self._boundaries(config)) - 1

    def batch_tokens(self, config, inputs, labels):
        return int(np.count_nonzero(labels.numpy()))  # target tokens

    # --- model, selection, evaluation ------------------------------------------

    def build_model(self, config, data):
        model = Transformer.from_config_object(
            preset_config(config, vocabulary_size=self.tokenizer.vocabulary_size)
        )
        model({"encoder_token_ids": np.ones((1, 2), "int32"),
               "decoder_token_ids": np.ones((1, 2), "int32")})
        return model

    def loss_and_metrics(self, config):
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=config.label_smoothing)
        return loss, [MaskedAccuracy(), MaskedPerplexity()]

    def translator(self, config, model, beam_size):
        """Strings -> translations with the run's decoding settings: the
        serving side's traced loops (`TranslationServing.translator`), so that
        validation BLEU, selection and the test share one greedy loop."""
        return self.serving().translator(model.backbone, beam_size, config.length_penalty)

    def validation_score(self, config, model, data, valid):
        if not config.eval_sentences:
            return (lambda m: -m.evaluate(m.prepared(valid), verbose=0, return_dict=True)["loss"],
                    "val_loss", "min")
        n = config.eval_sentences
        translator = self.translator(config, model, beam_size=1)

        def bleu(model):
            hypotheses = translator(data.valid[0][:n])
            return corpus_bleu(hypotheses, data.valid[1][:n], config.lower_case).score

        return bleu, "val_bleu", "max"

    def evaluation_plan_type(self):
        return TranslationEvaluationPlan

    def time_evaluation(self, config, model, data, score, seconds_loss, evaluation):
        beam = test_beam = config.beam_size > 1
        # Without validation BLEU (`eval_sentences=0`) the test still decodes:
        # one batch of validation sentences times it.
        n = min(config.eval_sentences or DECODE_BATCH, len(data.valid[0]))
        sources, references = data.valid[0][:n], data.valid[1][:n]
        translator = self.translator(config, model, beam_size=1)
        started = time.time()
        translator(sources[:1])  # traces the decoding loop, the first time only
        first = time.time() - started
        started = time.time()
        hypotheses = translator(sources)
        seconds_score = time.time() - started
        # Measured once, while planning; each later call finds the loop traced.
        trace = round(max(0.0, first), 2) if evaluation is None else (
            evaluation.seconds_decoding_trace)
        beam_trace = None if evaluation is None else evaluation.seconds_beam_trace
        seconds_final_score = seconds_score * final_length_share(
            self.tokenizer, hypotheses, references
        )
        # A batch costs about the same whatever its size (its longest
        # sentence sets the loop's length): scale by batches, not sentences.
        batches = math.ceil(len(data.test[0]) / DECODE_BATCH) / math.ceil(n / DECODE_BATCH)
        test_greedy = seconds_final_score * batches
        # train.py re-asks at each epoch of a budgeted run, with the model as
        # it is then.
        seconds_beam = (BEAM_OVER_GREEDY * test_greedy + 2 * trace) * beam
        if seconds_beam > budget.BEAM_SHARE * 60 * config.time_budget_minutes:
            # A user who gives a run ten minutes wants the model trained, not
            # three of them spent on a beam-search score: greedy only.
            seconds_beam = 0.0
            test_beam = False
        elif beam:
            # The beams' own loop is traced now, in the training's measured
            # time, rather than at the end, where its cost was a guess.
            beams = self.translator(config, model, config.beam_size)
            if not beams.traced:
                started = time.time()
                beams(sources[:1])
                beam_trace = round(time.time() - started, 2)
            seconds_beam = BEAM_OVER_GREEDY * test_greedy
        # An epoch's score and the end's selection and saving: validation
        # decodes, or (validated by loss) what any task spends on them.
        if config.eval_sentences:
            # The end also runs one loss pass over the validation split
            # (`Task.evaluate`'s valid_* figures).
            seconds_epoch = seconds_score
            seconds_rest = 5.0 + 3 * seconds_final_score + seconds_loss
        else:
            seconds_epoch, seconds_rest, _ = super().time_evaluation(
                config, model, data, score, seconds_loss, None
            )
        evaluation = TranslationEvaluationPlan(test_beam, trace, beam_trace)
        return seconds_epoch, seconds_rest + test_greedy + seconds_beam, evaluation

    def callbacks(self, config, model, data, logs_dir):
        callbacks = []
        if config.eval_sentences:
            n = config.eval_sentences
            callbacks.append(ValidationBleu(
                self.translator(config, model, beam_size=1),
                data.valid[0][:n], data.valid[1][:n], config.lower_case,
            ))
        callbacks.append(AttentionImages(
            model.backbone, os.path.join(logs_dir, "attention"),
            *attention_example(self.tokenizer, data.valid[0][0], data.valid[1][0],
                               config.max_sequence_length),
            self.tokenizer.vocabulary,
        ))
        return callbacks

    def evaluate_test(self, config, model, data, plan=None):
        plan = plan or FinalEvaluation()
        evaluation = plan.evaluation  # None: nothing timed, the whole test runs
        sources, references = data.test
        watch = budget.Stopwatch()
        with watch.phase("test_greedy"):
            decoded = {"greedy": self.translator(config, model, beam_size=1)(sources)}
        metrics = {"eval_parts": watch.phases}
        if config.beam_size > 1 and (evaluation is None or evaluation.test_beam):
            # The plan kept time for the beams; the greedy decode just timed
            # says what they will cost on the machine as it runs now.
            beams = self.translator(config, model, config.beam_size)
            traced = 0.0 if evaluation is None else evaluation.seconds_decoding_trace
            trace = 0.0 if beams.traced else 2 * traced
            estimate = (BEAM_OVER_GREEDY * watch.phases["test_greedy"] + trace) * (
                1 + budget.FINAL_SLACK)
            left = plan.end_time - time.time()
            if estimate > left:
                metrics["test_beam_skipped"] = (
                    f"the beam search would take about {estimate:.0f} s and the time "
                    f"budget has {max(0.0, left):.0f} s left"
                )
                warnings.warn(f"No beam-search test BLEU: {metrics['test_beam_skipped']}.",
                              stacklevel=2)
            else:
                with watch.phase("test_beam"):
                    decoded["beam"] = beams(sources)
        for name, hypotheses in decoded.items():
            # Headline: cased sacreBLEU of detokenized text; beside it the
            # lowercased Moses-tokenized BLEU that Multi30k papers quote.
            scores = bleu_scores(hypotheses, references, language=config.target_language)
            metrics[f"test_bleu_{name}"] = scores["bleu"]
            metrics[f"test_bleu_{name}_lowercase_tokenized"] = scores["bleu_lowercase_tokenized"]
        metrics["examples"] = [
            {"source": s, "reference": r, "translation": t}
            for s, r, t in zip(sources[: config.num_examples], references, decoded["greedy"],
                               strict=False)
        ]
        return metrics

    # --- serving ----------------------------------------------------------------

    def serving(self):
        if self._serving is None or self._serving.tokenizer is not self.tokenizer:
            self._serving = TranslationServing(self.tokenizer, self.name)
        return self._serving
