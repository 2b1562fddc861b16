"""Routing and health, the guard decorator, the SDK http_client, and OpenTelemetry output."""

from __future__ import annotations

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.routing import CircuitBreaker, RouteRequest
from tests.mockbackend import USER, Script, backend, error, gateway, ok


def test_breaker_opens_cools_down_and_probes() -> None:
    breaker = CircuitBreaker(threshold=3, cooldown_s=5.0, max_cooldown_s=20.0)
    for _ in range(3):
        breaker.on_failure(now=0.0)
    assert breaker.state(1.0) == "open" and not breaker.allows(4.9)
    assert breaker.state(5.0) == "half_open"
    breaker.on_attempt(5.0)  # the probe
    assert not breaker.allows(5.1)  # only one probe at a time
    breaker.on_failure(now=6.0)  # probe failed: the cool-down doubles
    assert breaker.allows(15.9) is False and breaker.allows(16.0)
    breaker.on_attempt(16.0)
    breaker.on_success()
    assert breaker.state(16.1) == "closed"


def test_breaker_tells_its_own_transitions_and_takes_the_fleets_quietly() -> None:
    told: list[tuple[bool, float]] = []
    breaker = CircuitBreaker(threshold=2, cooldown_s=5.0)
    breaker.on_transition = lambda opened, cooldown: told.append((opened, cooldown))
    breaker.force_open(now=0.0, until=3.0)  # another process found it down
    assert breaker.state(1.0) == "open" and breaker.state(3.0) == "half_open" and told == []
    breaker.force_close()  # another process's probe succeeded
    assert breaker.state(1.0) == "closed" and told == []
    breaker.on_failure(10.0)
    breaker.on_failure(10.0)  # opened here: published
    assert told == [(True, 5.0)]
    breaker.force_close()  # a fleet close does not end an open this process saw itself...
    assert breaker.state(11.0) == "open"
    breaker.on_attempt(15.0)
    breaker.on_success()  # ...its own probe does, and says so
    assert breaker.state(15.0) == "closed" and told == [(True, 5.0), (False, 0.0)]


async def test_private_calls_only_reach_private_backends() -> None:
    cloud, local = Script(ok("cloud")), Script(ok("local"))
    async with gateway(
        backend(cloud, name="cloud"), backend(local, name="local", private=True)
    ) as gate:
        results = [await gate.chat(USER, private=True) for _ in range(5)]
    assert {r.backend for r in results} == {"local"} and cloud.requests == []


async def test_tier_selects_small_model_backends() -> None:
    big, small = Script(ok("big")), Script(ok("small"))
    async with gateway(
        backend(big, name="big", tier="large"), backend(small, name="small", tier="small")
    ) as gate:
        r = await gate.chat(USER, tier="small")
        assert r.backend == "small"
        with pytest.raises(gg.NoBackendError):
            await gate.chat(USER, tier="small", private=True)


async def test_latency_sensitive_calls_prefer_the_faster_first_token() -> None:
    tpu, gpu = Script(ok()), Script(ok())
    async with gateway(
        backend(tpu, name="tpu", hardware="tpu"), backend(gpu, name="gpu", hardware="gpu")
    ) as gate:
        r = await gate.chat(USER, scenario="realtime_chat", stream=False)
    assert r.backend == "gpu"  # the prior: GPU has the best first token at low load


async def test_alternatives_carry_their_handicap_in_predicted_seconds() -> None:
    """Late binding waits at the chosen backend's cache gate and joins another's after its
    handicap: how much later the router predicts that backend would finish the call."""
    async with gateway(
        backend(Script(ok()), name="fast", hardware="tpu"),
        backend(Script(ok()), name="slow", hardware="gpu"),
        backend(Script(ok()), name="local", hardware="gpu", private=True),
    ) as gate:
        router = gate.runner.router
        fast, slow, local = (router.by_name[n] for n in ("fast", "slow", "local"))
        fast.latency.add(1.0)
        slow.latency.add(3.0)
        local.latency.add(2.0)
        request = RouteRequest()
        assert [(s.name, h) for s, h in router.alternatives(request, fast)] == [
            ("local", 1.0),
            ("slow", 2.0),
        ]
        # a better backend than the chosen one joins at once; the excluded one not at all
        others = router.alternatives(request, slow, frozenset({"local"}))
        assert [(s.name, h) for s, h in others] == [("fast", 0.0)]
        # the backend holding the prompt prefix is half a call time closer
        router.remember_prefix("guide", "slow")
        cached = RouteRequest(prefix_key="guide", private=True)
        assert router.alternatives(cached, local) == []  # the only private backend
        affine = router.alternatives(RouteRequest(prefix_key="guide"), fast)
        assert [(s.name, h) for s, h in affine] == [("slow", 0.5), ("local", 1.0)]
        # an open circuit takes a backend out of the race
        for _ in range(5):
            slow.breaker.on_failure(now=router.clock.now())
        assert [s.name for s, _ in router.alternatives(request, fast)] == ["local"]


async def test_a_prompt_prefix_goes_back_to_the_backend_that_cached_it() -> None:
    a, b = Script(ok()), Script(ok())
    ramped = gg.Scenario(name="ramped", ramp=gg.RampPolicy(min_prefix_tokens=0, warmup=False))
    guide = [{"role": "system", "content": "the brand guide"}, *USER]
    async with gateway(backend(a, name="a"), backend(b, name="b")) as gate:
        first = await gate.chat(guide, scenario=ramped, backend="b")
        router = gate.runner.router
        router.by_name["a"].latency.ewma = 0.8  # a looks faster than b ...
        router.by_name["b"].latency.ewma = 1.0  # ... by less than half a call (the prefill)
        again = await gate.chat(guide, scenario=ramped)
        other = await gate.chat([{"role": "system", "content": "another guide"}, *USER])
    assert (first.backend, again.backend) == ("b", "b")  # the prefix is cached on b
    assert other.backend == "a"  # another prefix goes to the faster one


async def test_guard_admits_retries_and_keeps_the_sdk_error_type() -> None:
    class SDKRateLimit(Exception):
        status_code = 429

    calls = 0

    async with gateway(backend(Script(ok()), concurrency=2)) as gate:

        @gate.guard(scenario="realtime_chat")
        async def flaky(x: int) -> int:
            nonlocal calls
            calls += 1
            if calls < 3:
                raise SDKRateLimit()
            return x * 2

        assert await flaky(21) == 42
        assert calls == 3

        @gate.guard()
        async def always_limited() -> None:
            raise SDKRateLimit()

        with pytest.raises(SDKRateLimit):
            await always_limited()

        @gate.guard()
        async def app_bug() -> None:
            raise KeyError("bug")

        before = calls
        with pytest.raises(KeyError):
            await app_bug()
        assert calls == before  # application errors are never retried
        stats = gate.stats()["mock"]
    assert stats.in_flight == 0 and stats.queued == 0


async def test_openai_sdk_runs_through_http_client() -> None:
    openai = pytest.importorskip("openai")
    script = Script(ok("from the sdk"))
    async with gateway(backend(script, concurrency=3)) as gate:
        client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9/v1",
            api_key="sk-test",
            http_client=gate.http_client("mock"),
            max_retries=0,
        )
        response = await client.chat.completions.create(model="m", messages=USER)
        stats = gate.stats()["mock"]
    assert response.choices[0].message.content == "from the sdk"
    assert stats.admitted == 1 and stats.in_flight == 0


async def test_spans_follow_the_genai_conventions_without_content() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    key = "sk-secret-value-123456"
    script = Script(error(503), ok("answer"))
    async with gateway(
        backend(script, api_key=key), tracer_provider=tracer_provider, meter_provider=meter_provider
    ) as gate:
        await gate.chat([{"role": "user", "content": "my private question"}], max_tokens=20)
    spans = exporter.get_finished_spans()
    attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
    calls = [s for s in spans if s.kind == SpanKind.INTERNAL]
    assert len(attempts) == 2 and len(calls) == 1
    assert all(s.name == "chat m" for s in attempts)
    assert all(
        s.parent is not None and s.parent.span_id == calls[0].context.span_id for s in attempts
    )
    failed, succeeded = attempts
    assert failed.attributes is not None and succeeded.attributes is not None
    assert failed.attributes["error.type"] == "BackendError"
    for name in (
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "server.address",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
    ):
        assert name in succeeded.attributes
    assert succeeded.attributes["gen_ai.request.max_tokens"] == 20
    every_value = " ".join(str(v) for s in spans for v in (s.attributes or {}).values())
    assert "private question" not in every_value and key not in every_value
    metrics = reader.get_metrics_data()
    assert metrics is not None
    names = {
        m.name for rm in metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"} <= names


async def test_content_goes_on_spans_only_when_opted_in() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with gateway(
        backend(Script(ok("the answer"))), tracer_provider=provider, capture_content=True
    ) as gate:
        await gate.chat([{"role": "user", "content": "my question"}])
    values = " ".join(
        str(v) for s in exporter.get_finished_spans() for v in (s.attributes or {}).values()
    )
    assert "my question" in values and "the answer" in values


async def test_warm_sends_one_minimal_request_per_backend() -> None:
    a, b = Script(ok()), Script(ok())
    system = [{"role": "system", "content": "You are helpful. " * 400}]
    async with gateway(backend(a, name="a"), backend(b, name="b")) as gate:
        results = await gate.warm(system)
    assert all(isinstance(r, gg.ChatResult) for r in results) and len(results) == 2
    for script in (a, b):
        body = script.bodies[0]
        assert body["max_tokens"] == 1 and body["messages"][0] == system[0]


def test_classify_foreign_exceptions() -> None:
    from gptgate.guard import classify_exception

    request = httpx2.Request("POST", "http://127.0.0.1/v1")
    assert isinstance(
        classify_exception(httpx2.ReadTimeout("t", request=request), "b"), gg.RequestTimeout
    )
    assert isinstance(
        classify_exception(httpx2.ConnectError("c", request=request), "b"), gg.BackendError
    )
    assert type(classify_exception(ValueError("v"), "b")) is gg.GateError
    assert not classify_exception(ValueError("v"), "b").retryable
