"""Loopback OpenAI-compatible servers in a thread that check the bearer key: the accepted
key is answered, any other is refused with the status given (401: revoked, 403: not allowed),
as api.openai.com answers a revoked or rotated key. Counts what each key sent (by a short
fingerprint: the keys themselves never go in a test's output)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from benchmarks._threadserver import QuietHandler, served

ANSWER = json.dumps({
    "id": "c", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}).encode()
LISTING = json.dumps({"object": "list", "data": [], "has_more": False}).encode()


def tag(key: str) -> str:
    """A short, one-way name for a key in a test's counts."""
    return hashlib.sha256(key.encode()).hexdigest()[:8]


class KeyServer:
    def __init__(self, accepts: str | None, status: int) -> None:
        self.accepts = accepts
        self.status = status
        self.url = ""
        self.lock = threading.Lock()
        #: requests by the fingerprint of the key they carried ("-": none)
        self.keys: Counter[str] = Counter()
        self.answered = 0
        self.refused = 0

    @property
    def requests(self) -> int:
        return self.answered + self.refused


@contextmanager
def key_server(accepts: str | None, status: int = 401) -> Iterator[KeyServer]:
    """A server that answers requests carrying ``Bearer {accepts}`` (None: every request)."""
    state = KeyServer(accepts, status)

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # a listing (``client.files.list()``): same key check
            self.do_POST()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            auth = self.headers.get("authorization") or ""
            key = auth.removeprefix("Bearer ").strip()
            ok = state.accepts is None or key == state.accepts
            with state.lock:
                state.keys[tag(key) if key else "-"] += 1
                if ok:
                    state.answered += 1
                else:
                    state.refused += 1
            if ok:
                self.send_response(200)
                payload = ANSWER if self.command == "POST" else LISTING
            else:
                self.send_response(state.status)
                payload = json.dumps({"error": {
                    "message": "Incorrect API key provided. You can find your API key at "
                               "https://platform.openai.com/account/api-keys.",
                    "type": "invalid_request_error", "code": "invalid_api_key",
                }}).encode()
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    with served(Handler) as root:
        state.url = f"{root}/v1"
        yield state
