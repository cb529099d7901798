"""The server under concurrent clients, beside the same signature in process and CTranslate2.

The translator of `bench_serving.py` (random weights, N=3, d_model 256,
8,000 pieces, sources of 20 pieces decoded to 64 tokens), exported with
`export.saved_model.export_model` into `translator/1`, is served by
`python -m export serve` in a process of its own (batching: at most 32
rows, 5 ms, 2 batches queued, one batch thread; every XLA bucket compiled
before it is ready), on 127.0.0.1.  Each round, interleaved:

  in process     `translate_xla` called in this process at batch 1 and at
                 batch 32 (the limit a batching server approaches)
  ctranslate2    CTranslate2 float32 of the same weights translating 32 of
                 the sentences one request at a time (`ctranslate2_worker.py`)
  server         1, 8 and 32 clients, each sending single sentences one
                 after the other (`server_client.py`): sentences a second,
                 p50 and p99 latency

Every server answer is checked against the in-process batch-1 answer for
its sentence, and counted: sent, answered, refused (503), failed, lost,
wrong.  Printed: 32 clients' throughput over the in-process batch-32
throughput (target >= 0.85) and over CTranslate2's one-at-a-time (>= 3),
and one client's p50 over 1.2 x the in-process batch-1 latency + 5 ms
(target <= 1), each as the median of the per-round paired ratios and
the quartile that must meet the target too (the lower for >=, the upper
for <=).  `--load` adds the load checks, on a second server (no
bucket warm-up): 10,000 requests from 32 clients, each answered once and
right; twice the queue's bound (128 requests) sent at once, five times,
the excess refused within 100 ms and the server's memory after each burst;
a new version copied in during a load run (0 failures); SIGTERM during a
load run (in-flight answered, exit 0).  Appended to
`benchmarks/results/server.json`.

    python3 benchmarks/bench_server.py [--quick] [--load] [--rounds N]

`--quick`: N=1, d_model 128, 2 rounds, fewer requests: a smoke run (not stored).
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import bench_serving
import common
import numpy as np
import server_client
import tensorflow as tf

SIGNATURE = "translate_xla"
BATCHING = ("max_batch_size { value: 32 }\nbatch_timeout_micros { value: 5000 }\n"
            "max_enqueued_batches { value: 2 }\nnum_batch_threads { value: 1 }\n")
BOUND = 64  # queued rows: max_batch_size x max_enqueued_batches
CLIENTS = (1, 8, 32)
PAUSE = bench_serving.PAUSE


class ServerProcess:
    """`python -m export serve` on a free loopback port, in its own process."""

    def __init__(self, base, batching_file, *flags, timeout=900):
        command = [sys.executable, "-m", "export", "serve", "--model_name=translator",
                   f"--model_base_path={base}", "--rest_api_port=0", "--enable_batching",
                   f"--batching_parameters_file={batching_file}",
                   "--file_system_poll_wait_seconds=0.5", *flags]
        self.process = subprocess.Popen(command, cwd=common.REPO_ROOT, stderr=subprocess.PIPE,
                                        text=True, env={**os.environ,
                                                        "PYTHONPATH": common.REPO_ROOT})
        self.lines = []
        started, self.url = time.monotonic(), None
        while self.url is None and time.monotonic() - started < timeout:
            line = self.process.stderr.readline()
            if not line:
                raise RuntimeError("the server ended:\n" + "".join(self.lines))
            self.lines.append(line)
            found = re.search(r"serving translator on (http://127\.0\.0\.1:\d+)", line)
            self.url = found and found.group(1)
        self.ready_s = time.monotonic() - started
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.process.stderr:
            self.lines.append(line)

    def resident_mib(self):
        with open(f"/proc/{self.process.pid}/status", encoding="utf-8") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))

    def get(self, path):
        answers, _ = server_client.run_clients(self.url, [("GET", path, b"")], 1)
        return json.loads(answers[0].body)

    def stop(self, timeout=120):
        """SIGTERM; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


def build(quick, directory):
    """The export (base path), its loaded signature, tokenizer, sizes and CTranslate2 worker."""
    from export.saved_model import export_model
    from keras_transformer.models import Transformer

    sizes = bench_serving.QUICK_SIZES if quick else bench_serving.SIZES
    tokenizer = bench_serving.synthetic_tokenizer()
    import keras

    keras.utils.set_random_seed(0)
    model = Transformer(vocabulary_size=tokenizer.vocabulary_size, **sizes)
    base = os.path.join(directory, "translator")
    export_model(model, os.path.join(base, "1"), tokenizer, config={"benchmark": True})
    signature = tf.saved_model.load(os.path.join(base, "1")).signatures[SIGNATURE]
    worker = None
    try:
        from export.ctranslate2 import export_ctranslate2

        path = export_ctranslate2(model, os.path.join(directory, "ct2"), tokenizer)
        worker = bench_serving.CTranslate2Worker(path)
    except ImportError as error:
        print(f"  CTranslate2 skipped: {error}", flush=True)
    return base, signature, tokenizer, sizes, worker


def in_process(signature, sentences):
    start = time.perf_counter()
    out = signature(sentences=tf.constant(sentences))["translations"].numpy()
    return time.perf_counter() - start, [t.decode() for t in out]


def ctranslate2_one_at_a_time(worker, tokenizer, sentences, max_length):
    """(seconds for all, translations) translating each sentence alone."""
    from training.text.detokenize import detokenize_ids

    vocabulary = list(tokenizer.vocabulary)
    ids_of = {token: i for i, token in enumerate(vocabulary)}
    pieces = [[vocabulary[i] for i in row if i] for row in
              tokenizer.tokenize(tf.constant(sentences)).to_list()]
    start, hypotheses = time.perf_counter(), []
    for one in pieces:
        hypotheses += worker([one], 1, max_length)
    seconds = time.perf_counter() - start
    texts = []
    for hypothesis in hypotheses:
        ids = np.array([[ids_of[t] for t in hypothesis]], np.int32)
        texts.append(detokenize_ids(tokenizer, ids).numpy()[0].decode())
    return seconds, texts


def serve_round(server, sentences, clients, per_client, references):
    """One load of `clients` clients; throughput, latencies and counts."""
    chosen = [sentences[i % len(sentences)] for i in range(clients * per_client)]
    requests = [("POST", "/v1/models/translator:predict",
                 server_client.predict_body(s, SIGNATURE)) for s in chosen]
    answers, wall = server_client.run_clients(server.url, requests, clients)
    counted = server_client.counts(answers, lambda i, body: json.loads(body)["predictions"]
                                   == [references[chosen[i]]])
    seconds = [a.seconds for a in answers if a is not None and a.status == 200]
    return {"throughput": counted["answered"] / wall, "p50": server_client.percentile(
        seconds, 50), "p99": server_client.percentile(seconds, 99), "counts": counted}


def quartiles(values):
    values = sorted(values)
    if len(values) > 1:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return {"median": statistics.median(values), "q1": q1, "q3": q3, "samples": values}


def speed(args, directory):
    base, signature, tokenizer, sizes, worker = build(args.quick, directory)
    pool = bench_serving.sentences(32 if args.quick else 64, seed=1)
    references, b1 = {}, []
    for sentence in pool:  # untimed: XLA's batch-1 program compiled on the first
        seconds, (text,) = in_process(signature, [sentence])
        references[sentence] = text
        b1.append(seconds)
    batch = pool[:32]
    _, batch_texts = in_process(signature, batch)
    same = np.mean([a == references[s] for a, s in zip(batch_texts, batch, strict=True)])
    print(f"in process, batch 32 answers as batch 1 for {same:.0%} of the sentences",
          flush=True)
    batching = os.path.join(directory, "batching.config")
    with open(batching, "w", encoding="utf-8") as f:
        f.write(BATCHING)
    server = ServerProcess(base, batching, "--xla_warmup_buckets")
    print(f"server ready in {server.ready_s:.0f} s (every XLA bucket compiled)", flush=True)
    per_client = {1: 8, 8: 6, 32: 4} if args.quick else {1: 16, 8: 16, 32: 8}
    max_length = min(bench_serving.SOURCE_PIECES + 50, sizes["max_sequence_length"])
    rounds = []
    for r in range(args.rounds):
        row = {}
        times = [in_process(signature, [s])[0] for s in pool[r * 3:r * 3 + 3]]
        row["in_process_batch_1_s"] = statistics.median(times)
        time.sleep(PAUSE)
        row["in_process_batch_32_s"] = in_process(signature, batch)[0]
        if worker is not None:
            time.sleep(PAUSE)
            seconds, texts = ctranslate2_one_at_a_time(worker, tokenizer, batch, max_length)
            row["ctranslate2_throughput"] = len(batch) / seconds
            row["ctranslate2_identical"] = float(np.mean(
                [t == references[s] for t, s in zip(texts, batch, strict=True)]))
        for clients in CLIENTS:
            time.sleep(PAUSE)
            row[f"server_{clients}"] = serve_round(server, pool, clients, per_client[clients],
                                                   references)
        rounds.append(row)
        print(f"round {r + 1}/{args.rounds}: in process b1 "
              f"{row['in_process_batch_1_s'] * 1e3:.1f} ms, b32 "
              f"{row['in_process_batch_32_s'] * 1e3:.0f} ms; " + ", ".join(
                  f"{c} clients {row[f'server_{c}']['throughput']:.1f}/s p50 "
                  f"{row[f'server_{c}']['p50'] * 1e3:.1f} ms" for c in CLIENTS), flush=True)
    status = server.stop()
    if worker is not None:
        worker.close()
    return base, batching, references, summarize(rounds, worker is not None, status)


def summarize(rounds, with_ct2, exit_status):
    """The ratios of the issue's targets, per round and over the rounds."""
    summary = {"rounds": rounds, "server_exit_status": exit_status}
    ratios = {"throughput_32_over_in_process_32": [
        r["server_32"]["throughput"] / (32 / r["in_process_batch_32_s"]) for r in rounds],
        "p50_1_over_in_process_1_plus_5ms": [
        r["server_1"]["p50"] / (1.2 * r["in_process_batch_1_s"] + 0.005) for r in rounds]}
    if with_ct2:
        ratios["throughput_32_over_ctranslate2_one_at_a_time"] = [
            r["server_32"]["throughput"] / r["ctranslate2_throughput"] for r in rounds]
    summary["ratios"] = {name: quartiles(values) for name, values in ratios.items()}
    totals = {}
    for r in rounds:
        for clients in CLIENTS:
            for key, value in r[f"server_{clients}"]["counts"].items():
                totals[key] = totals.get(key, 0) + value
    summary["counts"] = totals
    print("== server (translate_xla), medians over rounds", flush=True)
    for clients in CLIENTS:
        rows = [r[f"server_{clients}"] for r in rounds]
        print(f"  {clients:2d} clients: {statistics.median(x['throughput'] for x in rows):6.1f} "
              f"sentences/s, p50 {statistics.median(x['p50'] for x in rows) * 1e3:6.1f} ms, "
              f"p99 {statistics.median(x['p99'] for x in rows) * 1e3:6.1f} ms", flush=True)
    b1 = statistics.median(r["in_process_batch_1_s"] for r in rounds)
    b32 = statistics.median(r["in_process_batch_32_s"] for r in rounds)
    print(f"  in process: batch 1 {b1 * 1e3:.1f} ms ({1 / b1:.1f}/s), batch 32 "
          f"{b32 * 1e3:.0f} ms ({32 / b32:.1f}/s)", flush=True)
    if with_ct2:
        print(f"  CTranslate2 float32, one at a time: "
              f"{statistics.median(r['ctranslate2_throughput'] for r in rounds):.1f}/s, "
              f"identical to in process {statistics.median(r['ctranslate2_identical'] for r in rounds):.0%}",
              flush=True)
    targets = {"throughput_32_over_in_process_32": (">=", 0.85),
               "throughput_32_over_ctranslate2_one_at_a_time": (">=", 3.0),
               "p50_1_over_in_process_1_plus_5ms": ("<=", 1.0)}
    for name, stats in summary["ratios"].items():
        # Met when the quartile on the far side of the median meets it too.
        sign, target = targets[name]
        side, quartile = ("lower", stats["q1"]) if sign == ">=" else ("upper", stats["q3"])
        met = quartile >= target if sign == ">=" else quartile <= target
        print(f"  {name}: {stats['median']:.2f} (paired median; {side} quartile "
              f"{quartile:.2f}), target {sign} {target}: {'met' if met else 'NOT met'}",
              flush=True)
    print(f"  answers: {totals}; server exit status {exit_status}", flush=True)
    return summary


def main():
    def extra(parser):
        parser.add_argument("--load", action="store_true", help="also the load checks")
        parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5)")

    args = common.parse_args(__doc__.splitlines()[0], extra)
    args.rounds = args.rounds or (2 if args.quick else 5)
    info = common.machine_info()
    common.print_machine(info)
    directory = tempfile.mkdtemp(prefix="kt_bench_server_")
    try:
        base, batching, references, result = speed(args, directory)
        result = {"machine": info, "quick": args.quick, "signature": SIGNATURE,
                  "batching": BATCHING, **result}
        if args.load:
            from server_load import load_checks

            result["load"] = load_checks(args, base, batching, references, ServerProcess, BOUND)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    common.append_result("server", result, args)


if __name__ == "__main__":
    main()
