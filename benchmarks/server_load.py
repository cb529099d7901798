"""The load checks of `bench_server.py --load`, at full size, on a server of their own.

1. 10,000 requests from 32 clients: every one answered once (the server's
   own request count agrees) with the in-process answer; 0 lost.
2. Twice the queue's bound (128 single-sentence requests, bound 64 rows)
   sent at once over 128 open connections, five times: the excess answered
   503 within 100 ms, the rest answered right; the server's resident
   memory after each burst.
3. Version 2 copied into the base path while 32 clients keep sending: it is
   loaded, warmed and swapped in; 0 requests fail.
4. SIGTERM while 32 clients keep sending: every request sent at least 50 ms
   before the signal answered, and the server exits with 0.

The server here skips the bucket warm-up (a swap would compile every bucket
again under load); its first requests compile what they need.
"""

import json
import os
import re
import shutil
import threading
import time

import server_client

PREDICT = "/v1/models/translator:predict"
SIGNATURE = "translate_xla"


def _requests(sentences, count):
    chosen = [sentences[i % len(sentences)] for i in range(count)]
    return chosen, [("POST", PREDICT, server_client.predict_body(s, SIGNATURE)) for s in chosen]


def _right(references, chosen):
    return lambda i, body: json.loads(body)["predictions"] == [references[chosen[i]]]


def _predict_count(server):
    answers, _ = server_client.run_clients(server.url, [
        ("GET", "/monitoring/prometheus/metrics", b"")], 1)
    found = re.search(r'^:tensorflow:serving:request_count_total\{API="predict",'
                      r'model_name="translator",status="OK"\} (\S+)$',
                      answers[0].body.decode(), flags=re.M)
    return float(found.group(1)) if found else 0.0


class Background:
    """32 clients sending until `stop` is set, in a thread; `answers` when joined."""

    def __init__(self, server, sentences, references, count=100_000):
        self.chosen, requests = _requests(sentences, count)
        self.check = _right(references, self.chosen)
        self.stop = threading.Event()
        self.result = {}
        self.thread = threading.Thread(target=self._run, args=(server.url, requests))

    def _run(self, url, requests):
        answers, wall = server_client.run_clients(url, requests, 32, stop=self.stop)
        self.result.update(answers=answers, wall=wall)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stop.set()
        self.thread.join(600)

    def counts(self):
        return server_client.counts(self.result["answers"], self.check)


def many(server, sentences, references, count):
    before = _predict_count(server)
    chosen, requests = _requests(sentences, count)
    answers, wall = server_client.run_clients(server.url, requests, 32)
    counted = server_client.counts(answers, _right(references, chosen))
    counted["server_counted"] = _predict_count(server) - before
    counted["throughput"] = counted["answered"] / wall
    return counted


def bursts(server, sentence, reference, bound, times=5):
    import asyncio

    host, port = server.url.split("//", 1)[1].rsplit(":", 1)
    body = server_client.predict_body(sentence, SIGNATURE)
    results = []

    async def burst():
        connections = [server_client.Connection(host, int(port)) for _ in range(2 * bound)]
        await asyncio.gather(*(c.open() for c in connections))

        async def one(connection):
            started = time.monotonic()
            status, payload = await connection.request("POST", PREDICT, body)
            connection.close()
            return status, payload, time.monotonic() - started

        return await asyncio.gather(*(one(c) for c in connections))

    for _ in range(times):
        answers = asyncio.run(burst())
        refused = [seconds for status, _, seconds in answers if status == 503]
        right = sum(1 for status, payload, _ in answers if status == 200
                    and json.loads(payload)["predictions"] == [reference])
        results.append({"sent": len(answers), "refused": len(refused),
                        "refused_max_ms": max(refused, default=0) * 1e3,
                        "answered_right": right, "resident_mib": server.resident_mib()})
        time.sleep(0.5)
    return results


def swap(server, base, sentences, references):
    with Background(server, sentences, references) as load:
        time.sleep(2)
        shutil.copytree(os.path.join(base, "1"), os.path.join(base, ".2.partial"))
        os.rename(os.path.join(base, ".2.partial"), os.path.join(base, "2"))
        started, swapped = time.monotonic(), None
        while time.monotonic() - started < 900:
            states = {s["version"]: s["state"] for s in server.get(
                "/v1/models/translator")["model_version_status"]}
            if states == {"2": "AVAILABLE", "1": "END"}:
                swapped = time.monotonic() - started
                break
            time.sleep(0.2)
        time.sleep(3)
    return {**load.counts(), "swap_seconds": swapped}


def sigterm(server, sentences, references):
    with Background(server, sentences, references) as load:
        time.sleep(3)
        signalled = time.monotonic()
        status = server.stop()
    answers = [a for a in load.result["answers"] if a is not None]
    before = [a for a in answers if a.sent_at < signalled - 0.05]
    return {"exit_status": status, "sent_before_signal": len(before),
            "answered_before_signal": sum(a.status == 200 for a in before),
            "in_flight_at_signal": sum(a.sent_at + a.seconds > signalled for a in before),
            "after_signal": {str(k): sum(a.status == k for a in answers
                                         if a.sent_at >= signalled)
                             for k in {a.status for a in answers if a.sent_at >= signalled}}}


def load_checks(args, base, batching, references, server_class, bound):
    """Runs the four checks on a new `server_class(base, batching)`; their results."""
    sentences = list(references)
    server = server_class(base, batching)
    print(f"== load checks (second server, ready in {server.ready_s:.0f} s)", flush=True)
    result = {"many": many(server, sentences, references, 500 if args.quick else 10_000)}
    print(f"  {result['many']['sent']} requests, 32 clients: {result['many']}", flush=True)
    result["bursts"] = bursts(server, sentences[0], references[sentences[0]], bound,
                              times=2 if args.quick else 5)
    for b in result["bursts"]:
        print(f"  burst of {b['sent']}: {b['refused']} refused (slowest "
              f"{b['refused_max_ms']:.0f} ms), {b['answered_right']} answered right, "
              f"server {b['resident_mib']:.0f} MiB", flush=True)
    result["swap"] = swap(server, base, sentences, references)
    print(f"  version 2 swapped in under load in {result['swap']['swap_seconds']} s: "
          f"{result['swap']}", flush=True)
    result["sigterm"] = sigterm(server, sentences, references)
    print(f"  SIGTERM under load: {result['sigterm']}", flush=True)
    return result
