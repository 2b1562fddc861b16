"""A loopback OpenAI-compatible backend in a thread that counts the most requests in flight
at once and when each arrived (real OS processes of a fleet call it: tests/fleetworker.py).
A message starting with ``trip`` is answered 429 with ``retry-after`` once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from benchmarks._threadserver import QuietHandler, served

ANSWER = json.dumps({
    "id": "c", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}).encode()


class Counts:
    def __init__(self, delay_s: float, retry_after_s: int) -> None:
        self.delay_s = delay_s
        self.retry_after_s = retry_after_s
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        #: (monotonic arrival, first word of the message, status answered)
        self.arrivals: list[tuple[float, str, int]] = []
        self.tripped = threading.Event()


@contextmanager
def count_server(delay_s: float = 0.03, retry_after_s: int = 2) -> Iterator[tuple[str, Counts]]:
    counts = Counts(delay_s, retry_after_s)

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            word = str(body["messages"][-1]["content"]).split(" ", 1)[0]
            trip = word == "trip" and not counts.tripped.is_set()
            with counts.lock:
                counts.arrivals.append((time.monotonic(), word, 429 if trip else 200))
                counts.now += 1
                counts.most = max(counts.most, counts.now)
            if not trip:
                time.sleep(counts.delay_s)
            with counts.lock:
                counts.now -= 1
            if trip:
                counts.tripped.set()
                self.send_response(429)
                self.send_header("retry-after", str(counts.retry_after_s))
                payload = b'{"error": {"message": "slow down"}}'
            else:
                self.send_response(200)
                payload = ANSWER
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    with served(Handler) as root:
        yield f"{root}/v1", counts
