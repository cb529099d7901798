"""Clients for `bench_server.py`: many concurrent HTTP/1.1 connections, cheaply.

The clients share the machine with the server they time, so each costs as
little as it can: one asyncio stream per client, kept alive, a request
written as bytes and its answer read by `Content-Length` (the server always
sends one), no HTTP library in between.  `run_clients` sends each client's
requests one after the other, as a user waiting for an answer does, and
returns every answer with its latency; nothing is retried, so a request
that gets no answer is counted lost.
"""

import asyncio
import dataclasses
import json
import time


@dataclasses.dataclass
class Answer:
    """One request's outcome: HTTP status (None: no answer), body, seconds."""

    status: int | None
    body: bytes
    seconds: float
    sent_at: float


class Connection:
    """One kept-alive HTTP/1.1 connection to `host:port`."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method, path, body=b""):
        """(status, body) of one request."""
        if self.writer is None:
            await self.open()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        header = await self.reader.readuntil(b"\r\n\r\n")
        lines = header.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        length = int({k.lower(): v for k, v in fields.items()}.get("content-length", 0))
        payload = await self.reader.readexactly(length)
        if {k.lower(): v for k, v in fields.items()}.get("connection", "") == "close":
            self.close()
        return status, payload

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def _client(host, port, requests, answers, timeout, stop):
    connection = Connection(host, port)
    try:
        for index, (method, path, body) in requests:
            if stop is not None and stop.is_set():
                return
            started = time.monotonic()
            try:
                status, payload = await asyncio.wait_for(
                    connection.request(method, path, body), timeout)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                    ValueError, IndexError) as error:
                connection.close()
                status, payload = None, type(error).__name__.encode()
            answers[index] = Answer(status, payload, time.monotonic() - started, started)
    finally:
        connection.close()


def run_clients(url, requests, clients, timeout=120, stop=None):
    """Sends `requests` ([(method, path, body bytes)]) from `clients` clients,
    request i from client i % clients; returns ([Answer] in order, wall seconds)."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)

    async def main():
        answers = [None] * len(requests)
        shares = [[(i, r) for i, r in enumerate(requests) if i % clients == c]
                  for c in range(clients)]
        started = time.monotonic()
        await asyncio.gather(*(_client(host, int(port), share, answers, timeout, stop)
                               for share in shares))
        return answers, time.monotonic() - started

    return asyncio.run(main())


def predict_body(sentence, signature):
    """A row-format request body for one sentence."""
    return json.dumps({"signature_name": signature, "instances": [sentence]}).encode()


def counts(answers, check):
    """{"sent", "answered", "refused", "failed", "lost", "wrong"} of `answers`
    (None: never sent); `check(index, body)` says whether an answer is right."""
    sent = [(i, a) for i, a in enumerate(answers) if a is not None]
    answered = [(i, a) for i, a in sent if a.status == 200]
    refused = sum(1 for _, a in sent if a.status == 503)
    failed = sum(1 for _, a in sent if a.status not in (None, 200, 503))
    wrong = sum(1 for i, a in answered if not check(i, a.body))
    return {"sent": len(sent), "answered": len(answered), "refused": refused,
            "failed": failed, "lost": sum(1 for _, a in sent if a.status is None),
            "wrong": wrong}


def percentile(values, q):
    values = sorted(values)
    if not values:
        return None
    rank = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[rank]
