"""SDK traffic fails over: ``gate.http_client("a", fallback=["b"])`` re-sends a request the
primary cannot serve — its circuit open, its server refusing connections, its key refused,
its account empty — to ``b``, with ``b``'s URL, ``b``'s key in ``b``'s header and ``b``'s
model (gptgate/sdk_failover.py). A refusal of the request itself (a 400) is the answer; a
stream cut after its first byte is not sent again.

Before, an SDK request carried its own URL, key and model, so the transport could only send
it to the primary: a dead primary failed every request, a revoked key's circuit opened and
refused them unsent (docs/guide/failover.md), while ``gate.chat`` went to ``b``. Real
``openai`` and ``anthropic`` packages, loopback servers that check the key they were sent.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import anthropic
import openai
import pytest

import gptgate as gg
from benchmarks._keyserver import tag
from benchmarks._threadserver import QuietHandler, served
from tests.test_out_of_funds import OPENAI_QUOTA

A_KEY = "sk-proj-primary-0123456789abcdef"
B_KEY = "sk-proj-second-fedcba9876543210"
USER = [{"role": "user", "content": "hi"}]
ANSWER = {
    "id": "c", "object": "chat.completion", "model": "served",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
MESSAGE = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "served",
    "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
EMBEDDING = {"object": "list", "model": "served",
             "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}],
             "usage": {"prompt_tokens": 1, "total_tokens": 1}}
BAD_REQUEST = (400, {"error": {"message": "'temperature' must be at most 2",
                               "type": "invalid_request_error", "param": "temperature"}})
BAD_KEY = (401, {"error": {"message": "Incorrect API key provided.",
                           "type": "invalid_request_error", "code": "invalid_api_key"}})


@dataclass
class Seen:
    """One request a server got: its path (and query), key (fingerprint), model."""

    path: str
    key: str
    model: str | None
    headers: dict[str, str] = field(default_factory=dict)


class Server:
    """Answers requests carrying ``accepts`` (in whichever header), else 401; ``refusal``
    answers every request with that status and body; ``stream_cut`` ends a stream after its
    first event by dropping the connection."""

    def __init__(self, accepts: str, *, refusal: tuple[int, object] | None = None,
                 stream_cut: bool = False, claude: bool = False) -> None:
        self.accepts = accepts
        self.refusal = refusal
        self.stream_cut = stream_cut
        self.claude = claude
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.url = ""

    def handle(self, handler: QuietHandler) -> None:
        body = json.loads(handler.rfile.read(int(handler.headers.get("content-length", 0))))
        key = ""
        for name in ("authorization", "x-api-key", "api-key"):
            value = handler.headers.get(name)
            if value:
                key = value.removeprefix("Bearer ").strip()
        with self.lock:
            self.seen.append(Seen(handler.path, tag(key) if key else "-", body.get("model"),
                                  {k.lower(): v for k, v in handler.headers.items()}))
        status, payload = 200, (MESSAGE if self.claude else ANSWER)
        if "/embeddings" in handler.path:
            payload = EMBEDDING
        if key != self.accepts:
            status, payload = BAD_KEY
        elif self.refusal is not None:
            status, payload = self.refusal
        if status == 200 and body.get("stream"):
            self._stream(handler)
            return
        raw = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    def _stream(self, handler: QuietHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": "served",
                 "choices": [{"index": 0, "delta": {"content": "first "}, "finish_reason": None}]}
        events = [f"data: {json.dumps(chunk)}\n\n".encode(), b"data: [DONE]\n\n"]
        for n, event in enumerate(events):
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            handler.wfile.flush()
            if self.stream_cut and n == 0:  # the server dies mid-answer: the body is torn
                handler.close_connection = True
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
        handler.wfile.write(b"0\r\n\r\n")


@contextmanager
def server(accepts: str, **options: object) -> Iterator[Server]:
    state = Server(accepts, **options)  # type: ignore[arg-type]

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            state.handle(self)

    with served(Handler) as root:
        state.url = root
        yield state


@contextmanager
def dead_url() -> Iterator[str]:
    """A loopback port bound but not listening: every connection is refused at once."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        sock.close()


def _gate(a_url: str, b: Server, **b_options: object) -> gg.Gateway:
    backends = [
        gg.Backend(name="a", base_url=a_url, model="model-a", api_key=A_KEY),
        gg.Backend(name="b", base_url=b_options.pop("base_url", f"{b.url}/v1"),  # type: ignore[arg-type]
                   model="model-b", api_key=B_KEY, **b_options),  # type: ignore[arg-type]
    ]
    return gg.Gateway(backends, breaker_threshold=3, breaker_cooldown_s=600.0,
                      max_breaker_wait_s=0.0, deadline_s=30.0)


def _sdk(gate: gg.Gateway, url: str, **options: object) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=A_KEY, base_url=url, max_retries=0,
                              http_client=gate.http_client("a", fallback=["b"], **options))


@contextmanager
def _primary(kind: str) -> Iterator[tuple[str, Server | None]]:
    """The primary's URL as ``kind`` leaves it: dead, refusing its key, out of funds."""
    with ExitStack() as stack:
        if kind == "dead":
            yield stack.enter_context(dead_url()), None
            return
        refusal = {"refused-key": BAD_KEY, "no-funds": OPENAI_QUOTA}[kind]
        primary = stack.enter_context(server(A_KEY, refusal=refusal))
        yield f"{primary.url}/v1", primary


@pytest.mark.parametrize("kind", ["dead", "refused-key", "no-funds"])
async def test_a_primary_that_cannot_serve_fails_over_to_b(kind: str) -> None:
    with server(B_KEY) as b, _primary(kind) as (a_url, a):
        gate = _gate(a_url, b)
        async with gate:
            sdk = _sdk(gate, a_url)
            for _ in range(6):  # past the breaker's threshold: the circuit opens meanwhile
                answer = await sdk.chat.completions.create(model="model-a", messages=USER)
                assert answer.choices[0].message.content == "ok"
            assert gate.stats()["a"].circuit == "open"
            ledger = gate.ledger.entries
            assert ledger["b"].calls_ok == 6 and ledger["b"].input_tokens == 18
            assert "a" not in ledger or ledger["a"].calls_ok == 0
    # b got every request, with its own key and model: a's key never left for b's URL
    assert [(s.path, s.key, s.model) for s in b.seen] == [
        ("/v1/chat/completions", tag(B_KEY), "model-b")
    ] * 6
    if a is not None:  # the circuit opened after 3: the later requests went to b unsent
        assert len(a.seen) == 3
        assert {s.key for s in a.seen} == {tag(A_KEY)}


async def test_a_refusal_of_the_request_itself_is_not_failed_over() -> None:
    with server(B_KEY) as b, server(A_KEY, refusal=BAD_REQUEST) as a:
        gate = _gate(f"{a.url}/v1", b)
        async with gate:
            sdk = _sdk(gate, f"{a.url}/v1")
            with pytest.raises(openai.BadRequestError):
                await sdk.chat.completions.create(model="model-a", messages=USER,
                                                  temperature=3.0)
    assert len(a.seen) == 1 and b.seen == []


async def test_a_stream_cut_after_its_first_byte_is_not_sent_again() -> None:
    with server(B_KEY) as b, server(A_KEY, stream_cut=True) as a:
        gate = _gate(f"{a.url}/v1", b)
        async with gate:
            sdk = _sdk(gate, f"{a.url}/v1")
            stream = await sdk.chat.completions.create(model="model-a", messages=USER,
                                                       stream=True)
            got: list[str] = []
            with pytest.raises(openai.APIError):
                async for chunk in stream:
                    got.append(chunk.choices[0].delta.content or "")
            assert got == ["first "]
    assert len(a.seen) == 1 and b.seen == []


async def test_a_stream_fails_over_before_its_first_byte() -> None:
    with server(B_KEY) as b, dead_url() as a_url:
        gate = _gate(a_url, b)
        async with gate:
            sdk = _sdk(gate, a_url)
            stream = await sdk.chat.completions.create(model="model-a", messages=USER,
                                                       stream=True)
            got = [chunk.choices[0].delta.content async for chunk in stream]
    assert got == ["first "]
    assert [(s.key, s.model) for s in b.seen] == [(tag(B_KEY), "model-b")]


async def test_the_model_map_and_other_models() -> None:
    """A model the user maps goes as mapped; one neither mapped nor the primary's as is."""
    with server(B_KEY) as b, dead_url() as a_url:
        gate = _gate(a_url, b)
        async with gate:
            sdk = _sdk(gate, a_url, fallback_models={"b": {"model-a-mini": "model-b-mini"}})
            await sdk.chat.completions.create(model="model-a-mini", messages=USER)
            await sdk.chat.completions.create(model="shared-name", messages=USER)
            await sdk.chat.completions.create(model="model-a", messages=USER)
    assert [s.model for s in b.seen] == ["model-b-mini", "shared-name", "model-b"]


async def test_azure_fallback_gets_its_deployment_url_and_api_key_header() -> None:
    with server(B_KEY) as b, dead_url() as a_url:
        gate = _gate(a_url, b, provider="azure", base_url=b.url, deployment="dep-b",
                     api_version="2024-10-21")
        async with gate:
            sdk = _sdk(gate, a_url)
            await sdk.chat.completions.create(model="model-a", messages=USER)
            await sdk.embeddings.create(model="model-a", input="x")
    chat, embed = b.seen
    assert chat.path == "/openai/deployments/dep-b/chat/completions?api-version=2024-10-21"
    assert embed.path == "/openai/deployments/dep-b/embeddings?api-version=2024-10-21"
    assert chat.headers.get("api-key") == B_KEY and "authorization" not in chat.headers


async def test_anthropic_to_anthropic_sends_b_key_as_x_api_key() -> None:
    with server(B_KEY, claude=True) as b, dead_url() as a_url:
        root = a_url.removesuffix("/v1")
        gate = gg.Gateway([
            gg.Backend(name="a", provider="anthropic", base_url=root, model="claude-a",
                       api_key=A_KEY),
            gg.Backend(name="b", provider="anthropic", base_url=b.url, model="claude-b",
                       api_key=B_KEY),
        ], breaker_threshold=3, breaker_cooldown_s=600.0, max_breaker_wait_s=0.0)
        async with gate:
            claude = anthropic.AsyncAnthropic(
                api_key=A_KEY, base_url=root, max_retries=0,
                http_client=gate.http_client("a", fallback=["b"]))
            answer = await claude.messages.create(model="claude-a", max_tokens=10,
                                                  messages=USER)  # type: ignore[arg-type]
            assert answer.content[0].text == "ok"  # type: ignore[union-attr]
            assert gate.ledger.entries["b"].calls_ok == 1
    (seen,) = b.seen
    assert (seen.path, seen.model) == ("/v1/messages", "claude-b")
    assert seen.headers.get("x-api-key") == B_KEY and "authorization" not in seen.headers


def test_a_fallback_of_another_dialect_or_unknown_is_refused_at_once() -> None:
    gate = gg.Gateway([
        gg.Backend(name="a", base_url="http://127.0.0.1:9/v1", model="m", api_key=A_KEY),
        gg.Backend(name="claude", provider="anthropic", base_url="http://127.0.0.1:9",
                   model="claude-x", api_key=B_KEY),
        gg.Backend(name="az", provider="azure", base_url="http://127.0.0.1:9",
                   deployment="d", api_version="2024-10-21", model="m", api_key=B_KEY),
    ])
    with pytest.raises(gg.BadRequestError, match="anthropic") as caught:
        gate.http_client("a", fallback=["claude"])
    assert B_KEY not in str(caught.value) and A_KEY not in str(caught.value)
    for fallback, models in ((["nowhere"], None), (["a"], None), (["az", "az"], None),
                             (["az"], {"other": {"m": "n"}}), ("az", None)):
        with pytest.raises(gg.BadRequestError):
            gate.http_client("a", fallback=fallback, fallback_models=models)  # type: ignore[arg-type]
    gate.http_client("a", fallback=["az"])  # openai-shaped both: taken
    with pytest.raises(gg.BadRequestError):
        gg.SyncGateway(gateway=gate).http_client("a", fallback=["claude"])


async def test_a_tenants_key_is_not_failed_over() -> None:
    """A request carrying another key than the primary's is the tenant's: at b it would be
    billed to b's account. It meets the primary's fate as before."""
    with server(B_KEY) as b, dead_url() as a_url:
        gate = _gate(a_url, b)
        async with gate:
            tenant = openai.AsyncOpenAI(api_key="sk-tenant-1111222233334444", base_url=a_url,
                                        max_retries=0,
                                        http_client=gate.http_client("a", fallback=["b"]))
            with pytest.raises(openai.APIConnectionError):
                await tenant.chat.completions.create(model="model-a", messages=USER)
    assert b.seen == []


async def test_no_key_in_reprs_logs_or_errors_when_every_backend_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gptgate")
    with server("sk-other-key-not-b-000000000000") as b, dead_url() as a_url:
        gate = _gate(a_url, b)
        async with gate:
            client = gate.http_client("a", fallback=["b"])
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=a_url, max_retries=0,
                                     http_client=client)
            with pytest.raises(openai.APIConnectionError) as caught:  # a's own failure
                await sdk.chat.completions.create(model="model-a", messages=USER)
            shown = " ".join([repr(client), repr(client._transport), str(caught.value),
                              repr(caught.value.__cause__), caplog.text])
    assert len(b.seen) == 1  # b was tried, refused b's key
    assert A_KEY not in shown and B_KEY not in shown


def test_sync_client_fails_over() -> None:
    with (
        server(B_KEY) as b, _primary("refused-key") as (a_url, a),
        gg.SyncGateway(_gate(a_url, b).config.backends, breaker_threshold=3,
                   breaker_cooldown_s=600.0, max_breaker_wait_s=0.0) as gate,
    ):
        sdk = openai.OpenAI(api_key=A_KEY, base_url=a_url, max_retries=0,
                            http_client=gate.http_client("a", fallback=["b"]))
        for _ in range(4):
            assert sdk.chat.completions.create(
                model="model-a", messages=USER).choices[0].message.content == "ok"
        stream = sdk.chat.completions.create(model="model-a", messages=USER, stream=True)
        assert [c.choices[0].delta.content for c in stream] == ["first "]
        assert gate.ledger.entries["b"].calls_ok == 5
    assert a is not None and len(a.seen) == 3
    assert {(s.key, s.model) for s in b.seen} == {(tag(B_KEY), "model-b")}


async def test_when_b_cannot_serve_either_the_sdk_gets_the_primarys_answer() -> None:
    with server("sk-other-key-not-b-000000000000") as b, _primary("no-funds") as (a_url, a):
        gate = _gate(a_url, b)
        async with gate:
            sdk = _sdk(gate, a_url)
            with pytest.raises(openai.RateLimitError) as caught:  # a's 429, read whole
                await sdk.chat.completions.create(model="model-a", messages=USER)
            assert caught.value.code == "insufficient_quota"
            assert gate.ledger.entries["b"].calls_ok == 0
    assert a is not None and len(a.seen) == 1 and len(b.seen) == 1


async def test_spans_and_metrics_name_the_backend_that_served() -> None:
    from tests.test_sdk_client_telemetry import Otel

    otel = Otel()
    with server(B_KEY) as b, _primary("refused-key") as (a_url, _a):
        gate = gg.Gateway(
            _gate(a_url, b).config.backends, breaker_threshold=3, breaker_cooldown_s=600.0,
            max_breaker_wait_s=0.0, tracer_provider=otel.tracer_provider,
            meter_provider=otel.meter_provider,
        )
        async with gate:
            sdk = _sdk(gate, a_url)
            for _ in range(4):
                await sdk.chat.completions.create(model="model-a", messages=USER)
    spans = [s.attributes or {} for s in otel.clients()]
    served = [s for s in spans if s.get("gptgate.backend") == "b"]
    refused = [s for s in spans if s.get("gptgate.backend") == "a"]
    assert len(served) == 4 and len(refused) == 3
    assert {s["gen_ai.request.model"] for s in served} == {"model-b"}
    assert {s["server.port"] for s in served} == {int(b.url.rsplit(":", 1)[1])}
    shown = repr(spans)
    assert A_KEY not in shown and B_KEY not in shown
    durations = otel.points("gen_ai.client.operation.duration")
    by_backend = {p.attributes.get("gptgate.backend"): p.count for p in durations
                  if p.attributes.get("error.type") is None}
    assert by_backend.get("b") == 4 and "a" not in by_backend


async def test_an_azure_sdks_request_fails_over_to_an_openai_compatible_server() -> None:
    """The deployment's path, api-version and api-key stay behind: b gets its own path, its
    bearer key and its model for the deployment the SDK named."""
    with server(B_KEY) as b, dead_url() as a_url:
        root = a_url.removesuffix("/v1")
        gate = gg.Gateway([
            gg.Backend(name="a", provider="azure", base_url=root, deployment="dep-a",
                       api_version="2024-10-21", model="gpt-4o", api_key=A_KEY),
            gg.Backend(name="b", base_url=f"{b.url}/v1", model="model-b", api_key=B_KEY),
        ])
        async with gate:
            azure = openai.AsyncAzureOpenAI(
                azure_endpoint=root, api_key=A_KEY, api_version="2024-10-21", max_retries=0,
                http_client=gate.http_client("a", fallback=["b"]))
            answer = await azure.chat.completions.create(model="dep-a", messages=USER)
            assert answer.choices[0].message.content == "ok"
    (seen,) = b.seen
    assert (seen.path, seen.key, seen.model) == ("/v1/chat/completions", tag(B_KEY), "model-b")
    assert "api-key" not in seen.headers
