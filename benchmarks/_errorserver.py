"""A loopback server in a thread that refuses every request with one provider's error
response (its status, JSON body and headers), as the provider sends it: an OpenAI account out
of quota, Anthropic's spent credit balance, Azure's content filter. The body goes in two
chunks (``Transfer-Encoding: chunked``) so that a reader meets it as a network stream, not
as bytes already read. Counts the requests it got."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from benchmarks._threadserver import QuietHandler, served


class ErrorServer:
    def __init__(self, status: int, body: Any, headers: Mapping[str, str]) -> None:
        self.status = status
        self.payload = json.dumps(body).encode()
        self.headers = dict(headers)
        self.url = ""
        self.lock = threading.Lock()
        self.requests = 0


@contextmanager
def error_server(
    status: int, body: Any, headers: Mapping[str, str] | None = None
) -> Iterator[ErrorServer]:
    """A server answering every POST with ``status`` and ``body`` (JSON), chunked."""
    state = ErrorServer(status, body, headers or {})

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            with state.lock:
                state.requests += 1
            self.send_response(state.status)
            self.send_header("content-type", "application/json")
            for name, value in state.headers.items():
                self.send_header(name, value)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            half = len(state.payload) // 2
            for part in (state.payload[:half], state.payload[half:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

    with served(Handler) as root:
        state.url = root
        yield state
