"""gate.embed: concurrent calls merged into few /embeddings requests, split at caps, each
caller's vectors whole and in order, a failed request failing only its own callers."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import gptgate as gg
from gptgate.embed import DEFAULT_MAX_INPUTS, embedding_caps
from gptgate.sim import LoopClock, SimEngine, SimServer, SimTransport, run_virtual
from gptgate.sim.embeddings import vector_for
from gptgate.telemetry import NAMES

PRICE = gg.Price(input_per_mtok=0.02)
DIMS = 8


class Recording(httpx2.AsyncBaseTransport):
    """The simulator, with each embeddings request's inputs recorded; ``fail(texts)`` may
    answer a request with a status instead."""

    def __init__(self, engine: SimEngine, fail: Any = None) -> None:
        self.inner = SimTransport(engine)
        self.sent: list[list[str]] = []
        self.fail = fail

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/embeddings"):
            texts = json.loads(request.content)["input"]
            self.sent.append(texts)
            status = self.fail(texts, len(self.sent)) if self.fail is not None else None
            if status is not None:
                return httpx2.Response(
                    status, json={"error": {"message": "boom", "type": "server_error"}}
                )
        return await self.inner.handle_async_request(request)


def _gate(
    clock: LoopClock, *, fail: Any = None, window_s: float = 0.005, profile: Any = "gpu",
    **backend: Any,
) -> tuple[gg.Gateway, Recording, SimEngine]:
    engine = SimEngine(profile, clock=clock, seed=1)
    recording = Recording(engine, fail)
    options: dict[str, Any] = {
        "name": "emb", "base_url": "http://127.0.0.1:8000/v1", "model": "chat-model",
        "embedding_model": "text-embedding-3-small", "price": PRICE,
    }
    options.update(backend)
    gate = gg.Gateway(
        [gg.Backend(transport=recording, **options)], clock=clock, embed_window_s=window_s,
        max_attempts=1,
    )
    return gate, recording, engine


def test_concurrent_single_texts_are_merged_into_one_request_and_return_in_order() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, sent, engine = _gate(clock)
        got: dict[int, list[float]] = {}

        async def one(i: int) -> None:
            got[i] = await gate.embed(f"text number {i}", model="text-embedding-3-small")

        async with gate:
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(one, i)
            many = await gate.embed(["z", "y", "x"])
        assert len(sent.sent) == 2  # the 200 calls in one request; the list in another
        assert got == {i: vector_for(f"text number {i}", DIMS) for i in range(200)}
        assert many == [vector_for(t, DIMS) for t in ("z", "y", "x")]
        bill = engine.ledger.snapshot()
        entry = gate.ledger.entries["emb"]
        assert entry.input_tokens == bill.input_tokens > 0
        assert entry.cost_usd == pytest.approx(bill.bill_usd(PRICE))

    run_virtual(main)


def test_no_request_goes_above_the_input_or_the_token_cap_and_long_lists_are_split() -> None:
    async def main() -> None:
        clock = LoopClock()
        # the server's own cap is 8 (a 400 beyond); the backend says 8 too
        profile = SimEngine("gpu").profile.model_copy(update={"embedding_max_inputs": 8})
        gate, sent, _ = _gate(clock, profile=profile, embedding_max_inputs=8)
        async with gate:
            texts = [f"item {i}" for i in range(30)]  # 2 tokens each
            singles: list[list[float]] = []
            async with anyio.create_task_group() as tg:
                for i in range(13):
                    tg.start_soon(lambda i=i: _append(singles, gate.embed(f"solo {i}")))
                vectors = await gate.embed(texts)
        assert vectors == [vector_for(t, DIMS) for t in texts]
        assert len(singles) == 13
        assert max(len(r) for r in sent.sent) == 8
        assert sum(len(r) for r in sent.sent) == 43
        assert len(sent.sent) == 6  # ceil(43 / 8): merged and split, nothing left over

        tokens_gate, tokens_sent, _ = _gate(clock, embedding_max_tokens=5)
        async with tokens_gate:
            assert await tokens_gate.embed(["abcdefgh"] * 7) == [vector_for("abcdefgh", DIMS)] * 7
        assert [len(r) for r in tokens_sent.sent] == [2, 2, 2, 1]  # 2 tokens each, ≤ 5 a request

    run_virtual(main)


async def _append(out: list[list[float]], call: Any) -> None:
    out.append(await call)


def test_a_failed_merged_request_fails_only_its_own_callers_with_the_typed_error() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, sent, _ = _gate(
            clock, fail=lambda texts, n: 500 if "poison" in texts else None,
            embedding_max_inputs=2,
        )
        results: dict[str, Any] = {}

        async def one(text: str) -> None:
            try:
                results[text] = await gate.embed(text)
            except gg.GateError as error:
                results[text] = error

        async with gate, anyio.create_task_group() as tg:
            for text in ("a", "b", "c", "poison"):
                tg.start_soon(one, text)
                await anyio.lowlevel.checkpoint()
        assert sent.sent == [["a", "b"], ["c", "poison"]]
        assert results["a"] == vector_for("a", DIMS) and results["b"] == vector_for("b", DIMS)
        assert isinstance(results["c"], gg.BackendError)
        assert isinstance(results["poison"], gg.BackendError)
        assert results["c"] is not results["poison"]  # each caller its own error object

    run_virtual(main)


def test_a_failed_request_is_retried_and_the_retry_counted() -> None:
    async def main() -> None:
        clock = LoopClock()
        engine = SimEngine("gpu", clock=clock, seed=1)
        recording = Recording(engine, fail=lambda texts, n: 503 if n == 1 else None)
        gate = gg.Gateway(
            [gg.Backend(name="emb", base_url="http://127.0.0.1:8000/v1", model="m",
                        embedding_model="e", transport=recording)],
            clock=clock, max_attempts=3,
        )
        async with gate:
            assert await gate.embed("again") == vector_for("again", DIMS)
            stats = gate.stats()["emb"]
        assert len(recording.sent) == 2
        assert stats.retries == 1 and stats.failures == 1

    run_virtual(main)


def test_window_zero_sends_each_call_alone() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, sent, _ = _gate(clock, window_s=0.0)
        async with gate, anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(gate.embed, f"t{i}")
        assert sorted(sent.sent) == [[f"t{i}"] for i in range(5)]

    run_virtual(main)


def test_bad_input_and_no_embedding_backend_are_typed_errors_and_send_nothing() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, sent, _ = _gate(clock)
        async with gate:
            with pytest.raises(gg.BadRequestError, match="input 1 must be a non-empty string"):
                await gate.embed(["ok", ""])
            with pytest.raises(gg.BadRequestError, match="string or a list of strings"):
                await gate.embed(42)  # type: ignore[arg-type]
            # token ids, or a None from a missing field: named as what they are, not as an
            # empty string (the message spoke of empty strings only)
            with pytest.raises(gg.BadRequestError, match="input 0 must be a string, got int"):
                await gate.embed([17, 42])  # type: ignore[list-item]
            with pytest.raises(gg.BadRequestError, match="input 1 must be a string, got None"):
                await gate.embed(["ok", None])  # type: ignore[list-item]
            with pytest.raises(gg.NoBackendError, match="embedding_model"):
                await gate.embed("x", model="another-model")
            with pytest.raises(gg.NoBackendError):
                await gate.embed("x", private=True)
            assert await gate.embed([]) == []
        assert sent.sent == []
        with pytest.raises(gg.GatewayClosedError):
            await gate.embed("closed")

    run_virtual(main)


def test_caps_come_from_the_backend_else_its_provider_preset() -> None:
    def backend(**options: Any) -> gg.Backend:
        return gg.Backend(name="b", base_url="http://x/v1", model="m", **options)

    assert embedding_caps(backend()).max_inputs == 2048  # openai's preset
    assert embedding_caps(backend()).max_tokens == 300_000
    assert embedding_caps(backend(provider="llamacpp")).max_inputs == 32
    assert embedding_caps(backend(provider="vllm")).max_inputs == DEFAULT_MAX_INPUTS
    assert embedding_caps(backend(provider="vllm")).max_tokens is None
    assert embedding_caps(backend(embedding_max_inputs=10)).max_inputs == 10
    with pytest.raises(ValueError, match="embedding_max_inputs"):
        backend(embedding_max_inputs=0)


def test_each_request_is_a_span_embeddings_model_with_its_input_tokens() -> None:
    async def main() -> None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        clock = LoopClock()
        engine = SimEngine("gpu", clock=clock, seed=1)
        gate = gg.Gateway(
            [gg.Backend(name="emb", base_url="http://127.0.0.1:8000/v1", model="m",
                        embedding_model="e-small", transport=SimTransport(engine), price=PRICE)],
            clock=clock, tracer_provider=provider,
        )
        async with gate:
            await gate.embed(["one", "two"])
        spans = [s for s in exporter.get_finished_spans() if s.name == "embeddings e-small"]
        assert len(spans) == 1
        attributes = spans[0].attributes or {}
        assert attributes[NAMES["operation"]] == "embeddings"
        assert attributes[NAMES["input_tokens"]] == engine.ledger.snapshot().input_tokens

    run_virtual(main)


def test_the_simulator_refuses_more_inputs_than_its_cap_with_a_400() -> None:
    async def main() -> None:
        profile = SimEngine("gpu").profile.model_copy(update={"embedding_max_inputs": 3})
        engine = SimEngine(profile, clock=LoopClock())
        body = json.dumps({"model": "e", "input": ["a", "b", "c", "d"]}).encode()
        response = await engine.handle("POST", "/v1/embeddings", {}, body)
        assert response.status == 400 and b"too long" in (response.body or b"")
        ok = await engine.handle("POST", "/v1/embeddings", {}, body.replace(b', "d"', b""))
        answer = json.loads(ok.body or b"")
        assert [d["embedding"] for d in answer["data"]] == [vector_for(t, 8) for t in "abc"]
        assert answer["usage"]["prompt_tokens"] == 3
        assert engine.ledger.snapshot().client_errors == 1

    run_virtual(main)


def test_the_simulators_rate_limits_count_embeddings_requests_too() -> None:
    """A hosted provider's RPM and TPM count embeddings requests; the simulator's did not,
    so nothing paced embeddings on a rate-limited profile could ever be tested."""

    async def main() -> None:
        profile = SimEngine("gpu").profile.model_copy(update={"rpm": 2, "tpm": None})
        engine = SimEngine(profile, clock=LoopClock())
        body = json.dumps({"model": "e", "input": ["a"]}).encode()
        answers = [await engine.handle("POST", "/v1/embeddings", {}, body) for _ in range(3)]
        assert [a.status for a in answers] == [200, 200, 429]
        refused = dict(answers[2].headers)
        assert float(refused["retry-after"]) > 0 and "x-ratelimit-remaining-requests" in refused
        assert engine.ledger.snapshot().rate_limited == 1

    run_virtual(main)


def test_over_loopback_http_the_vectors_and_the_bill_match() -> None:
    engine = SimEngine("gpu", seed=2)
    with SimServer(engine) as base_url:

        async def main() -> None:
            gate = gg.Gateway(
                [gg.Backend(name="emb", base_url=base_url, model="m", embedding_model="e",
                            price=PRICE, api_key="sk-test")],
            )
            async with gate:
                out = await gate.embed([f"doc {i}" for i in range(50)])
            assert out == [vector_for(f"doc {i}", DIMS) for i in range(50)]
            assert gate.ledger.entries["emb"].input_tokens == engine.ledger.snapshot().input_tokens

        anyio.run(main)


def test_on_azure_the_embedding_deployment_is_called_with_its_api_version_and_key() -> None:
    async def main() -> None:
        clock = LoopClock()
        profile = SimEngine("gpu").profile.model_copy(
            update={"flavor": "azure", "api_key": "azure-key-0123", "model": "emb-deploy"}
        )
        engine = SimEngine(profile, clock=clock, seed=1)
        sent: list[httpx2.Request] = []
        inner = SimTransport(engine)

        async def handle(request: httpx2.Request) -> httpx2.Response:
            sent.append(request)
            return await inner.handle_async_request(request)

        gate = gg.Gateway(
            [gg.Backend(name="az", provider="azure", base_url="http://127.0.0.1:8000",
                        deployment="chat-deploy", embedding_model="emb-deploy",
                        api_key="azure-key-0123", transport=_Handler(handle))],
            clock=clock,
        )
        async with gate:
            assert await gate.embed("hello") == vector_for("hello", DIMS)
        assert sent[0].url.path == "/openai/deployments/emb-deploy/embeddings"
        assert sent[0].url.params["api-version"] and sent[0].headers["api-key"]

    run_virtual(main)


class _Handler(httpx2.AsyncBaseTransport):
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response: httpx2.Response = await self.handle(request)
        return response


def test_closing_gives_an_embed_in_flight_its_grace() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, sent, _ = _gate(clock)
        got: list[Any] = []
        await gate.start()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _append(got, gate.embed("late")))
            await clock.sleep(0.001)  # queued: the 5 ms window is still open
            await gate.aclose(grace_s=1.0)
        assert got == [vector_for("late", DIMS)] and len(sent.sent) == 1
        with pytest.raises(gg.GatewayClosedError):
            await gate.embed("after")

    run_virtual(main)


class _Slow(httpx2.AsyncBaseTransport):
    """Records each embeddings request's body and answers it after ``delay_s``."""

    def __init__(self, inner: Recording, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        await anyio.sleep(self.delay_s)
        return await self.inner.handle_async_request(request)


def test_timeout_is_each_callers_own_deadline_and_never_sent_to_the_provider() -> None:
    """``gate.embed(texts, timeout=5)`` sent ``"timeout": 5`` in the request body (a provider
    refuses an unknown argument with a 400, failing every caller merged with it) and bounded
    nothing."""

    async def main() -> None:
        clock = LoopClock()
        engine = SimEngine("gpu", clock=clock, seed=1)
        slow = _Slow(Recording(engine), delay_s=5.0)
        gate = gg.Gateway(
            [gg.Backend(name="emb", base_url="http://127.0.0.1:8000/v1", model="m",
                        embedding_model="e", transport=slow)],
            clock=clock, max_attempts=1,
        )
        ended: dict[str, tuple[object, float]] = {}

        async def one(name: str, timeout: float | None) -> None:
            try:
                outcome: object = await gate.embed(name, timeout=timeout)
            except gg.GateError as error:
                outcome = error
            ended[name] = outcome, clock.now()

        async with gate, anyio.create_task_group() as tg:
            tg.start_soon(one, "tight", 1.0)
            tg.start_soon(one, "loose", None)
        assert [b.get("timeout") for b in slow.bodies] == [None]  # one merged request
        tight, tight_at = ended["tight"]
        assert isinstance(tight, gg.RequestTimeout) and tight.deadline
        assert tight_at == pytest.approx(1.0, abs=0.01)
        assert ended["loose"][0] == vector_for("loose", DIMS)

    run_virtual(main)


def test_a_gate_chat_option_is_a_typed_error_not_a_provider_parameter() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, sent, _ = _gate(clock)
        async with gate:
            for option in ("priority", "scenario", "max_attempts", "hedge", "cache"):
                with pytest.raises(gg.BadRequestError, match=f"{option}= is a gate.chat option"):
                    await gate.embed("x", **{option: 1})
        assert sent.sent == []

    run_virtual(main)
