"""A loopback HTTP server in a daemon thread, for the small fake providers the benchmarks
and tests build (a refusing account, a key check, a request counter): one place that starts
it on a free port and shuts it down whole, so no copy forgets the shutdown."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive (as providers serve) and no access log on the test's output."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def served(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port); yield the root URL, no ``/v1``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
