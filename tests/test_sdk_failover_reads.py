"""A stored answer a fallback created is read back through the primary's client: the
gateway remembers which backend created each stored answer it moved (the last 4096 per
gateway: gptgate/sdk_placed.py) and sends a read of it — ``responses.retrieve``, its
``input_items``, its ``delete`` — or a follow-up naming it (``previous_response_id``) to that
backend, with that backend's key.

Before, ``GET /responses/{id}`` was never moved: an answer created on ``b`` while ``a`` was
down was read from ``a`` — a connection error (a dead ``a``) or a 401 (a refused key), the
answer unreachable through the client that created it. Real ``openai`` package, loopback
servers checking the key.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx2
import openai
import pytest

from benchmarks._keyserver import tag
from benchmarks._threadserver import QuietHandler, served
from gptgate.sdk_placed import PlacedAnswers, sniff_id
from tests.test_sdk_failover import A_KEY, B_KEY, _gate, dead_url


def _response(rid: str, *, text: str = "ok") -> dict[str, Any]:
    return {"id": rid, "object": "response", "created_at": 1.0, "status": "completed",
            "error": None, "incomplete_details": None, "model": "served",
            "output": [{"type": "message", "id": "msg_1", "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text,
                                     "annotations": []}]}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


class Responses:
    """A Responses API server keeping what it created; a key other than ``accepts``: 401."""

    def __init__(self, accepts: str, prefix: str) -> None:
        self.accepts, self.prefix = accepts, prefix
        self.kept: dict[str, dict[str, Any]] = {}
        self.seen: list[tuple[str, str, str]] = []  # method, path, key tag
        self.lock = threading.Lock()
        self.url = ""

    def handle(self, handler: QuietHandler, method: str) -> None:
        raw = handler.rfile.read(int(handler.headers.get("content-length", 0)))
        key = (handler.headers.get("authorization") or "").removeprefix("Bearer ").strip()
        with self.lock:
            self.seen.append((method, handler.path, tag(key) if key else "-"))
            status, payload = 200, None
            path = handler.path.removeprefix("/v1")
            if key != self.accepts:
                status, payload = 401, {"error": {
                    "message": "Incorrect API key provided.", "code": "invalid_api_key"}}
            elif method == "POST" and path == "/responses":
                body = json.loads(raw)
                previous = body.get("previous_response_id")
                if previous is not None and previous not in self.kept:
                    status, payload = 404, {"error": {"message": "not found"}}
                else:
                    rid = f"resp_{self.prefix}{len(self.kept)}"
                    text = "ok" if previous is None else f"after {previous}"
                    payload = self.kept[rid] = _response(rid, text=text)
            elif method in ("GET", "DELETE") and path.startswith("/responses/"):
                rid = path.split("/")[2]
                if rid not in self.kept:
                    status, payload = 404, {"error": {"message": f"{rid} not found"}}
                elif method == "DELETE":
                    payload = {"id": rid, "object": "response", "deleted": True}
                    del self.kept[rid]
                else:
                    payload = self.kept[rid]
            else:
                status, payload = 404, {"error": {"message": "no such path"}}
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


@contextmanager
def responses_server(accepts: str, prefix: str) -> Iterator[Responses]:
    state = Responses(accepts, prefix)

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            state.handle(self, "POST")

        def do_GET(self) -> None:
            state.handle(self, "GET")

        def do_DELETE(self) -> None:
            state.handle(self, "DELETE")

    with served(Handler) as root:
        state.url = root
        yield state


@contextmanager
def _primary(kind: str) -> Iterator[tuple[str, Responses | None]]:
    with ExitStack() as stack:
        if kind == "dead":
            yield stack.enter_context(dead_url()), None
            return
        a = stack.enter_context(responses_server("sk-proj-revoked-key-000000", "a"))
        yield f"{a.url}/v1", a


@pytest.mark.parametrize("kind", ["dead", "refused-key"])
async def test_an_answer_created_on_the_fallback_is_read_back_there(kind: str) -> None:
    with responses_server(B_KEY, "b") as b, _primary(kind) as (a_url, a):
        gate = _gate(a_url, b)  # type: ignore[arg-type]
        async with gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=a_url, max_retries=0,
                                     http_client=gate.http_client("a", fallback=["b"]))
            created = await sdk.responses.create(model="model-a", input="hi")
            read = await sdk.responses.retrieve(created.id)
            follow = await sdk.responses.create(model="model-a", input="and?",
                                                previous_response_id=created.id)
            again = await sdk.responses.retrieve(follow.id)
            deleted = await sdk.responses.delete(created.id)
            with pytest.raises(openai.NotFoundError):  # gone from b: b says so
                await sdk.responses.retrieve(created.id)
    assert (created.id, read.id, read.output_text) == ("resp_b0", "resp_b0", "ok")
    assert (follow.id, follow.output_text, again.id) == ("resp_b1", "after resp_b0", "resp_b1")
    assert deleted is None
    assert [(m, p) for m, p, _ in b.seen] == [
        ("POST", "/v1/responses"), ("GET", "/v1/responses/resp_b0"),
        ("POST", "/v1/responses"), ("GET", "/v1/responses/resp_b1"),
        ("DELETE", "/v1/responses/resp_b0"), ("GET", "/v1/responses/resp_b0"),
    ]
    assert {k for _, _, k in b.seen} == {tag(B_KEY)}  # b's key, never a's
    if a is not None:  # only the first create tried a: the rest went where the answer is
        assert [(m, p) for m, p, _ in a.seen] == [("POST", "/v1/responses")]


async def test_an_answer_the_primary_created_is_read_from_the_primary() -> None:
    with responses_server(B_KEY, "b") as b, responses_server(A_KEY, "a") as a:
        gate = _gate(f"{a.url}/v1", b)  # type: ignore[arg-type]
        async with gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=f"{a.url}/v1", max_retries=0,
                                     http_client=gate.http_client("a", fallback=["b"]))
            created = await sdk.responses.create(model="model-a", input="hi")
            read = await sdk.responses.retrieve(created.id)
    assert read.id == created.id == "resp_a0"
    assert b.seen == [] and len(a.seen) == 2


async def test_a_streamed_creates_id_is_read_from_its_first_event() -> None:
    """A stream's answer id comes in its first event (``response.created``), as the SDK reads
    it, split across chunks; one not in the answer's first 8 KiB is not looked for."""
    found: list[str] = []
    head = (b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
            b'"response":{"id":"resp_s1","object":"response"}}\n\n')
    response = httpx2.Response(200, stream=_Chunks([head[:60], head[60:], b"data: [DONE]\n\n"]))
    sniff_id(response, found.append)
    assert b"".join([c async for c in response.aiter_bytes()]).startswith(head)
    late = httpx2.Response(200, stream=_Chunks([b" " * 9000, b'{"id":"resp_late"}']))
    sniff_id(late, found.append)
    await late.aread()
    placed = PlacedAnswers(size=2)
    for rid in ("r1", "r2", "r3"):
        placed.placed(rid, "b")
    assert found == ["resp_s1"]
    assert placed.of("/v1/responses/r1", {}) is None  # the oldest, evicted: bounded
    assert placed.of("/v1/responses/r3/input_items", {}) == ("b", b"responses/r3/input_items")
    assert placed.of("/v1/responses", {"previous_response_id": "r2"}) == ("b", b"responses")


class _Chunks(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
