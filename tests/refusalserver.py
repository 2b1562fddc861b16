"""A loopback server that refuses every request the same way (an empty account, a revoked
key): the tests of how a refusal is read count what reached it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def refusing_server(
    refusal: tuple[int, Any], retry_after: str | None = None
) -> Iterator[tuple[str, list[int]]]:
    """Answer every POST with ``refusal`` (status, JSON body); yield the server's root URL
    (no ``/v1``) and the count of requests it got."""
    hits = [0]
    status, body = refusal
    payload = json.dumps(body).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            hits[0] += 1
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            if retry_after is not None:
                self.send_header("retry-after", retry_after)
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
