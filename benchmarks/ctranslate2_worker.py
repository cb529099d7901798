"""One CTranslate2 model in a process of its own, for `bench_serving.py`.

Two `ctranslate2.Translator`s in one process slow each other down (their
OpenMP thread teams compete for the cores even while one is idle: a float32
model's request at batch 1 took 290 ms beside an int8 one, 38 ms alone), so
each CTranslate2 path of the benchmark runs in its own worker, as it would be
deployed.  The worker reads one JSON request a line on stdin and answers one
JSON line on stdout:

    {"pieces": [[...], ...], "beam_size": 1, "max_length": 64, "length_penalty": 0.6}
    -> {"seconds": 0.031, "hypotheses": [[...], ...]}

    python3 benchmarks/ctranslate2_worker.py MODEL_DIR THREADS
"""

import json
import sys
import time

import ctranslate2


def main():
    model_dir, threads = sys.argv[1], int(sys.argv[2])
    translator = ctranslate2.Translator(
        model_dir, device="cpu", intra_threads=threads, inter_threads=1
    )
    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        results = translator.translate_batch(
            request["pieces"],
            beam_size=request["beam_size"],
            length_penalty=request["length_penalty"],
            max_decoding_length=request["max_length"],
            min_decoding_length=0,
            return_end_token=True,
        )
        seconds = time.perf_counter() - start
        hypotheses = [result.hypotheses[0] for result in results]
        print(json.dumps({"seconds": seconds, "hypotheses": hypotheses}), flush=True)


if __name__ == "__main__":
    main()
