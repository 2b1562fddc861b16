"""Azure OpenAI (issue 32): ``Backend(provider="azure", deployment=..., api_version=...)``
against the simulator's Azure flavor — its URLs, its ``api-key`` / Entra ID auth, its
"Resource not found", its short-window 429s — and the official ``AsyncAzureOpenAI`` SDK on
``gate.http_client`` over loopback HTTP, governed and billed like ``AsyncOpenAI``."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimServer, get_profile, run_virtual
from gptgate.testing import sim_backend
from gptgate.wire import azure as azure_wire
from gptgate.wire import dialect_for

from .mockbackend import Script, gateway

USER = [{"role": "user", "content": "Tell me about connection pools."}]
KEY = "azure-key-0123456789abcdef"
PRICE = gg.Price(input_per_mtok=2.5, cached_input_per_mtok=1.25, output_per_mtok=10.0)
ROOT = "http://127.0.0.1:8000"


def _profile(**update: Any) -> Any:
    base = {"flavor": "azure", "api_key": KEY, "rpm": None, "tpm": None, "max_queue": None,
            "output_tokens_mean": 40.0}
    return get_profile("gpu").model_copy(update={**base, **update})


def _azure(clock: LoopClock, profile: Any = None, **options: Any) -> tuple[gg.Backend, SimEngine]:
    profile = profile or _profile()
    settings: dict[str, Any] = {
        "provider": "azure", "base_url": ROOT, "deployment": profile.model,
        "api_key": KEY, "concurrency": 8, "price": PRICE,
    }
    settings.update(options)
    return sim_backend(profile, name="az", clock=clock, seed=3, **settings)


class Recorder(httpx2.AsyncBaseTransport):
    """Records each request and, once answered, its status — in the order they were sent."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: list[httpx2.Request] = []
        self.statuses: list[int] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        index = len(self.statuses)
        self.requests.append(request)
        self.statuses.append(0)
        response = await self.inner.handle_async_request(request)
        self.statuses[index] = response.status_code
        return response

    def longest_429_run(self) -> int:
        best = run = 0
        for status in self.statuses:
            run = run + 1 if status == 429 else 0
            best = max(best, run)
        return best


def _recorded(backend: gg.Backend) -> tuple[gg.Backend, Recorder]:
    recorder = Recorder(backend.transport)
    return backend.model_copy(update={"transport": recorder}), recorder


# -- URLs and auth --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "deployment", "expected"),
    [
        ("https://res.openai.azure.com", "gpt-4o-prod",
         "https://res.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions"
         "?api-version=2024-10-21"),
        ("https://res.openai.azure.com/openai", "gpt-4o-prod",
         "https://res.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions"
         "?api-version=2024-10-21"),
        ("https://res.openai.azure.com", None,
         "https://res.openai.azure.com/openai/v1/chat/completions"),
        ("https://res.openai.azure.com/openai/v1", None,
         "https://res.openai.azure.com/openai/v1/chat/completions"),
        ("https://gw.example.com/azure", "d",  # behind a gateway path: kept
         "https://gw.example.com/azure/openai/deployments/d/chat/completions"
         "?api-version=2024-10-21"),
    ],
)
def test_azure_urls(base_url: str, deployment: str | None, expected: str) -> None:
    backend = gg.Backend(
        name="az", provider="azure", base_url=base_url, deployment=deployment, model="gpt-4o"
    )
    base = httpx2.AsyncClient(base_url=backend.base_url).base_url
    assert str(dialect_for(backend).chat_url(base)) == expected


async def _one_chat(options: dict[str, Any]) -> tuple[gg.ChatResult, Recorder, SimEngine]:
    clock = LoopClock()
    backend, engine = _azure(clock, **options)
    backend, recorder = _recorded(backend)
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        result = await gate.chat(USER, max_tokens=30)
    return result, recorder, engine


def test_a_chat_goes_to_the_deployment_with_the_key_in_api_key() -> None:
    result, recorder, _ = run_virtual(_one_chat, {})
    assert result.text and result.finish_reason in ("stop", "length")
    (request,) = recorder.requests
    assert request.url.path == "/openai/deployments/gpt-5.5/chat/completions"
    assert request.url.params["api-version"] == gg.providers.AZURE_API_VERSION
    assert request.headers["api-key"] == KEY
    assert "authorization" not in request.headers


def test_the_v1_api_without_a_deployment() -> None:
    result, recorder, _ = run_virtual(_one_chat, {"deployment": None, "model": "gpt-5.5"})
    assert result.text
    (request,) = recorder.requests
    assert request.url.path == "/openai/v1/chat/completions" and not request.url.query
    assert json.loads(request.content)["model"] == "gpt-5.5"


def test_the_key_variable_is_azures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-azure-000000")
    result, recorder, _ = run_virtual(_one_chat, {"api_key": None})
    assert result.text and recorder.requests[0].headers["api-key"] == KEY


def test_a_wrong_key_is_an_authentication_error_not_retried() -> None:
    async def main() -> tuple[gg.GateError, int]:
        clock = LoopClock()
        backend, engine = _azure(clock, api_key="wrong-key-0000000000")
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            with pytest.raises(gg.BadRequestError) as info:
                await gate.chat(USER, max_tokens=5)
        return info.value, engine.ledger.snapshot().requests

    error, requests = run_virtual(main)
    assert error.status == 401 and "authentication failed" in error.message
    assert "wrong-key" not in str(error)
    assert requests == 1


@pytest.mark.parametrize(
    ("options", "hint"),
    [
        ({"deployment": "gpt-4o-typo"}, "deployment 'gpt-4o-typo' with api-version"),
        ({"api_version": "2023-01-01"}, "api-version '2023-01-01'"),
        ({"base_url": ROOT + "/v1"}, "that base_url is the resource's endpoint"),
        ({"base_url": ROOT + "/v1", "deployment": None, "model": "gpt-5.5"},
         "base_url must be the resource's endpoint"),
    ],
)
def test_resource_not_found_says_what_to_check(options: dict[str, Any], hint: str) -> None:
    async def main() -> gg.GateError:
        clock = LoopClock()
        backend, _ = _azure(clock, **options)
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            with pytest.raises(gg.BadRequestError) as info:
                await gate.chat(USER, max_tokens=5)
        return info.value

    error = run_virtual(main)
    assert error.status == 404 and not error.retryable
    assert hint in error.message and "https://RESOURCE.openai.azure.com" in error.message


def _jwt(exp: float, marker: str) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': exp, 'sub': marker})}.c2lnbmF0dXJl"


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_entra_token_provider_is_asked_again_only_when_the_token_expires(
    asynchronous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(azure_wire, "_now", lambda: now[0])
    issued: list[str] = []

    def token() -> str:
        issued.append(_jwt(now[0] + 3600, f"t{len(issued)}"))
        return issued[-1]

    async def async_token() -> str:
        return token()

    async def main() -> list[httpx2.Request]:
        clock = LoopClock()
        backend, _ = _azure(
            clock, api_key=None, azure_ad_token_provider=async_token if asynchronous else token
        )
        backend, recorder = _recorded(backend)
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            for _ in range(3):
                await gate.chat(USER, max_tokens=5)
            now[0] += 3600 - azure_wire.REFRESH_MARGIN_S + 1  # within the margin: refresh
            await gate.chat(USER, max_tokens=5)
            await gate.chat(USER, max_tokens=5)
        return recorder.requests

    requests = run_virtual(main)
    assert len(issued) == 2
    sent = [r.headers["authorization"] for r in requests]
    assert sent == [f"Bearer {issued[0]}"] * 3 + [f"Bearer {issued[1]}"] * 2
    assert all("api-key" not in r.headers for r in requests)


def test_a_revoked_token_is_replaced_once_on_a_401(monkeypatch: pytest.MonkeyPatch) -> None:
    good = _jwt(9e9, "good")
    tokens = iter([_jwt(9e9, "revoked"), good])

    async def main() -> tuple[str, list[int]]:
        clock = LoopClock()
        profile = _profile(bearer_tokens=(good,))
        backend, _ = _azure(
            clock, profile, api_key=None, azure_ad_token_provider=lambda: next(tokens)
        )
        backend, recorder = _recorded(backend)
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            result = await gate.chat(USER, max_tokens=5)
        return result.text, recorder.statuses

    text, statuses = run_virtual(main)
    assert text and statuses == [401, 200]


def test_the_token_provider_is_never_shown() -> None:
    def secret_provider() -> str:
        return "tok"

    backend = gg.Backend(
        name="az", provider="azure", base_url="https://r.openai.azure.com", deployment="d",
        azure_ad_token_provider=secret_provider,
    )
    assert "secret_provider" not in repr(backend)
    assert "azure_ad_token_provider" not in backend.model_dump()


async def test_a_token_provider_returning_nothing_is_a_clear_error() -> None:
    script = Script()
    backend = gg.Backend(
        name="az", provider="azure", base_url="https://r.openai.azure.com", deployment="d",
        azure_ad_token_provider=lambda: None, transport=httpx2.MockTransport(script),
    )
    async with gateway(backend) as gate:
        with pytest.raises(gg.BadRequestError, match="azure_ad_token_provider returned no token"):
            await gate.chat(USER, max_tokens=5)
    assert script.requests == []


# -- streams, tools, the bill ---------------------------------------------------------------


async def _mixed_calls() -> tuple[gg.Gateway, SimEngine, list[str]]:
    clock = LoopClock()
    backend, engine = _azure(clock)
    texts: list[str] = []
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        system = {"role": "system", "content": "You are a careful assistant. " * 300}

        async def one(i: int) -> None:
            messages = [system, {"role": "user", "content": f"question {i}"}]
            if i % 2:
                async with gate.stream(messages, max_tokens=40) as s:
                    texts.append("".join([t async for t in s]))
            else:
                texts.append((await gate.chat(messages, max_tokens=40)).text)

        async with anyio.create_task_group() as tg:
            for i in range(24):
                tg.start_soon(one, i)
    return gate, engine, texts


def test_chats_and_streams_are_billed_as_the_server_bills_them() -> None:
    gate, engine, texts = run_virtual(_mixed_calls)
    assert len(texts) == 24 and all(texts)
    assert_billed_as_the_server_bills(gate, engine, PRICE, calls=24)


def assert_billed_as_the_server_bills(
    gate: gg.Gateway, engine: SimEngine, price: gg.Price, *, calls: int
) -> None:
    """The ledger's tokens are the server's, and its dollars the server's tokens at the
    provider's prices (cached input at its own rate), within 0.5%."""
    server, ours = engine.ledger.snapshot(), gate.ledger.total()
    assert server.ok == calls and server.cached_input_tokens > 0  # the shared prefix cached
    assert (ours.input_tokens, ours.cached_input_tokens, ours.output_tokens) == (
        server.input_tokens, server.cached_input_tokens, server.output_tokens
    )
    billed = price.cost(gg.Usage(
        input_tokens=server.input_tokens, cached_input_tokens=server.cached_input_tokens,
        output_tokens=server.output_tokens,
    ))
    assert ours.cost_usd == pytest.approx(billed, rel=0.005)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


async def _tool_calls() -> tuple[list[gg.ChatResult], Recorder]:
    clock = LoopClock()
    backend, _ = _azure(clock)
    backend, recorder = _recorded(backend)
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        results = [await gate.chat(USER, tools=TOOLS, tool_choice="required", stream=stream)
                   for stream in (False, True)]
    return results, recorder


def test_tools_reach_the_deployment_and_tool_calls_come_back() -> None:
    """Over the simulator's Azure flavor, a chat and a stream: the tools reach the
    deployment's path and one tool call comes back (a stream's pieces folded into it)."""
    results, recorder = run_virtual(_tool_calls)
    for r in results:
        assert r.finish_reason == "tool_calls"
        assert r.raw is not None
        (call,) = r.raw["choices"][0]["message"]["tool_calls"]
        assert call["function"] == {"name": "get_weather", "arguments": '{"city":"sim"}'}
    assert recorder.statuses == [200, 200]
    assert {r.url.path for r in recorder.requests} == {
        f"/openai/deployments/{_profile().model}/chat/completions"}
    bodies = [json.loads(r.content) for r in recorder.requests]
    assert all(b["tools"] == TOOLS and b["tool_choice"] == "required" for b in bodies)


# -- short-window 429s ----------------------------------------------------------------------


async def _burst(n: int, rpm: int) -> tuple[list[gg.ChatResult | BaseException], Recorder]:
    clock = LoopClock()
    backend, _ = _azure(clock, _profile(rpm=rpm, rpm_window_s=1.0), concurrency=16)
    backend, recorder = _recorded(backend)
    async with gg.Gateway([backend], clock=clock, seed=1, max_attempts=6) as gate:
        items = [{"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 20}
                 for i in range(n)]
        results = await gate.map(items)
    return results, recorder


def test_a_429_burst_on_short_windows_sends_no_more_than_two_429s_in_a_row() -> None:
    results, recorder = run_virtual(_burst, 150, 600)  # 10 requests a second, 16 at once
    assert not [r for r in results if isinstance(r, BaseException)]
    assert 429 in recorder.statuses  # the window was really hit
    assert recorder.longest_429_run() <= 2  # was 28, and 79 of 100 calls failed
    assert recorder.statuses.count(429) < 0.2 * len(recorder.statuses)


def test_azure_headers_minus_one_and_remaining_only_set_no_budget() -> None:
    dialect = dialect_for(gg.Backend(
        name="az", provider="azure", base_url="https://r.openai.azure.com", deployment="d"))
    info = dialect.rate_limits(httpx2.Headers({
        "x-ratelimit-remaining-requests": "79", "x-ratelimit-remaining-tokens": "-1",
    }))
    assert info is not None and info.remaining_requests == 79
    assert info.remaining_tokens is None and info.limit_requests is None


def test_a_429_without_retry_after_waits_for_the_reset_azure_states() -> None:
    dialect = dialect_for(gg.Backend(
        name="az", provider="azure", base_url="https://r.openai.azure.com", deployment="d"))
    body = json.dumps({"error": {"code": "429", "message": "exceeded token rate limit"}})
    error = dialect.error_for_status(
        429, httpx2.Headers({"x-rate-limit-reset-tokens": "55"}), body.encode(), backend="az"
    )
    assert isinstance(error, gg.RateLimitedError) and error.retry_after == 55.0


# -- the official SDK over loopback HTTP ------------------------------------------------------

SCALE = 50.0


@pytest.fixture
def azure_server() -> Iterator[tuple[str, SimEngine]]:
    sim = SimEngine(_profile(output_tokens_mean=30.0), clock=gg.ScaledClock(SCALE), seed=5)
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url.removesuffix("/v1"), sim


async def test_async_azure_openai_on_the_gateways_client_is_governed_and_billed(
    azure_server: tuple[str, SimEngine],
) -> None:
    root, sim = azure_server
    backend = gg.Backend(
        name="az", provider="azure", base_url=root, deployment="gpt-5.5", api_key=KEY,
        concurrency=3, price=PRICE, timeout=60.0,
    )
    gate = gg.Gateway([backend], clock=gg.ScaledClock(SCALE), seed=1)
    async with gate:
        client = openai.AsyncAzureOpenAI(
            azure_endpoint=root, api_key=KEY, api_version="2024-10-21",
            http_client=gate.http_client("az"), max_retries=0,
        )
        peak = 0

        async def one(i: int) -> None:
            nonlocal peak
            if i % 2:
                stream = await client.chat.completions.create(
                    model="gpt-5.5", messages=USER, max_tokens=20, stream=True,
                    stream_options={"include_usage": True},
                )
                async for _ in stream:
                    peak = max(peak, gate.stats()["az"].in_flight)
            else:
                answer = await client.chat.completions.create(
                    model="gpt-5.5", messages=USER, max_tokens=20
                )
                assert answer.choices[0].message.content
                peak = max(peak, gate.stats()["az"].in_flight)

        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i)
        stats = gate.stats()["az"]
        assert stats.calls == 12 and stats.failures == 0 and stats.in_flight == 0
        assert peak <= 3  # the backend's limit held the SDK's requests
        server = sim.ledger.snapshot()
        ours = gate.ledger.total()
        assert server.ok == 12
        assert (ours.input_tokens, ours.output_tokens) == (
            server.input_tokens, server.output_tokens
        )
        assert ours.cost_usd == pytest.approx(
            server.billed_usd(PRICE), rel=0.005
        )


async def test_the_sdk_with_a_wrong_key_is_refused_by_the_server(
    azure_server: tuple[str, SimEngine],
) -> None:
    root, _ = azure_server
    backend = gg.Backend(name="az", provider="azure", base_url=root, deployment="gpt-5.5")
    async with gg.Gateway([backend], clock=gg.ScaledClock(SCALE)) as gate:
        client = openai.AsyncAzureOpenAI(
            azure_endpoint=root, api_key="not-the-key-000000", api_version="2024-10-21",
            http_client=gate.http_client("az"), max_retries=0,
        )
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="gpt-5.5", messages=USER, max_tokens=5)
        assert gate.stats()["az"].failures == 1


# -- the simulator's Azure flavor -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "query", "headers", "status"),
    [
        ("/openai/deployments/gpt-5.5/chat/completions", "api-version=2024-10-21",
         {"api-key": KEY}, 200),
        ("/openai/v1/chat/completions", "", {"api-key": KEY}, 200),
        ("/openai/deployments/gpt-5.5/chat/completions", "api-version=2024-10-21",
         {"authorization": f"Bearer {KEY}"}, 401),  # a key sent the OpenAI way
        ("/openai/deployments/gpt-5.5/chat/completions", "api-version=2024-10-21",
         {"api-key": "other-key"}, 401),
        ("/openai/deployments/gpt-5.5/chat/completions", "", {"api-key": KEY}, 404),
        ("/v1/chat/completions", "", {"api-key": KEY}, 404),
        ("/openai/deployments/other/chat/completions", "api-version=2024-10-21",
         {"api-key": KEY}, 404),
    ],
)
def test_the_simulated_resource_checks_paths_and_auth_as_azure_does(
    path: str, query: str, headers: dict[str, str], status: int
) -> None:
    async def main() -> Any:
        engine = SimEngine(_profile(rpm=600, rpm_window_s=1.0), clock=LoopClock(), seed=1)
        body = json.dumps({"model": "x", "messages": USER, "max_tokens": 5}).encode()
        return await engine.handle("POST", path, headers, body, query)

    response = run_virtual(main)
    assert response.status == status
    names = {name for name, _ in response.headers}
    assert "apim-request-id" in names
    if status == 200:  # Azure's two: what is left, no limit and no reset
        assert {"x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens"} <= names
        assert not {"x-ratelimit-limit-requests", "x-ratelimit-reset-requests"} & names
        assert ("x-ratelimit-remaining-tokens", "-1") in response.headers  # no TPM limit
    elif status == 404 and path.startswith("/openai/deployments/gpt"):
        error = json.loads(response.body)["error"]
        assert error == {"code": "404", "message": "Resource not found"}


def test_the_simulated_window_takes_its_share_of_the_minute() -> None:
    async def main() -> list[int]:
        engine = SimEngine(_profile(rpm=600, rpm_window_s=1.0), clock=LoopClock(), seed=1)
        body = json.dumps({"model": "x", "messages": USER, "max_tokens": 1}).encode()
        statuses: list[int] = []

        async def one() -> None:
            response = await engine.handle(
                "POST", "/openai/v1/chat/completions", {"api-key": KEY}, body
            )
            statuses.append(response.status)

        async with anyio.create_task_group() as tg:
            for _ in range(12):  # at one instant: 10 fit the 1 s window of 600 RPM
                tg.start_soon(one)
        return statuses

    statuses = run_virtual(main)
    assert sorted(statuses) == [200] * 10 + [429] * 2


def test_the_pacer_spaces_the_calls_a_short_window_429_held() -> None:
    from gptgate.limits.pacing import MAX_SPACING_S, RateLimitPacer

    pacer = RateLimitPacer()
    assert pacer.reserve(0.0, 100) == 0.0  # nothing known, nothing paused
    pacer.pause_until(1.0, 0.1)  # a 429: pause until t=1, then one call per 0.1 s
    delays = [pacer.reserve(0.0, 100) for _ in range(4)]
    assert delays == pytest.approx([1.0, 1.1, 1.2, 1.3])  # one a slot, not all at 1.0
    pauses = pacer.pauses
    pacer.pause_until(2.0, 0.1)  # another 429 while they waited
    assert pacer.pauses == pauses + 1
    # the waiting calls take new places: the first when the new pause ends, then a slot each
    assert [pacer.requeue(1.5) for _ in range(2)] == pytest.approx([0.5, 0.6])
    for _ in range(200):
        pacer.relax()  # successes narrow the gap to nothing
    assert pacer.reserve(10.0, 100) == 0.0
    pacer.pause_until(11.0, 55.0)  # a token budget's minute: the gap is capped
    pacer.reserve(10.0, 100)
    assert pacer.reserve(10.0, 100) == pytest.approx(1.0 + MAX_SPACING_S)


def test_401s_of_requests_in_flight_across_a_refresh_ask_for_one_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request sent with the revoked token whose 401 comes back after another request's
    refresh already replaced it takes the new token: it does not ask Entra again (each such
    401 did, one at a time behind the lock — a fresh token fetched per request in flight)."""
    issued: list[str] = []

    async def provider() -> str:
        await anyio.sleep(0.5)  # a round trip to Entra ID
        issued.append(_jwt(9e9, f"t{len(issued)}"))
        return issued[-1]

    class Revoking(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            await anyio.sleep(0.2)  # the round trip to Azure
            if request.headers["authorization"] == f"Bearer {issued[0]}":
                return httpx2.Response(401, json={"error": {"code": "401", "message": "no"}})
            return httpx2.Response(200, json={
                "id": "c", "object": "chat.completion", "model": "d",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

    async def main() -> list[str]:
        backend = gg.Backend(
            name="az", provider="azure", base_url="https://r.openai.azure.com",
            deployment="d", azure_ad_token_provider=provider, transport=Revoking(),
            concurrency=16,
        )
        async with gg.Gateway([backend], clock=LoopClock(), seed=1) as gate:
            async with anyio.create_task_group() as tg:
                for _ in range(16):  # calls arrive 0.1 s apart, across the refresh
                    tg.start_soon(lambda: gate.chat(USER, max_tokens=5))
                    await anyio.sleep(0.1)
            return [r.text for r in [await gate.chat(USER, max_tokens=5)]]

    assert run_virtual(main) == ["hi"]
    assert len(issued) == 2  # the revoked one and its replacement
