"""An SDK request on ``gate.http_client(name)`` that addresses another server than backend
``name``'s is refused unsent (gptgate/sdk_address.py).

Before: ``openai.AsyncOpenAI(http_client=gate.http_client("gpu-local"))`` — no ``base_url=``,
as the docs once showed it — sent gpu-local's prompt to the SDK's default,
https://api.openai.com, booked, limited and traced as gpu-local's: a prompt meant for a
private backend went to a third party unnoticed. Real ``openai``, ``anthropic`` packages;
every backend's server is a MockTransport that records whatever reaches it, whatever its
host, so an empty record proves nothing was sent anywhere.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import gptgate as gg

KEY = "sk-proj-gpulocal-0123456789abcdef"
USER: Any = [{"role": "user", "content": "hi"}]
ANSWER = {
    "id": "c", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


class Server:
    """Whatever reaches a backend's transport: its origin, one per request."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def transport(self) -> httpx2.MockTransport:
        def answer(request: httpx2.Request) -> httpx2.Response:
            self.seen.append(f"{request.url.scheme}://{request.url.netloc.decode()}")
            return httpx2.Response(200, json=ANSWER)

        return httpx2.MockTransport(answer)


def _backend(server: Server, base_url: str = "http://gpu:8000/v1", **options: Any) -> gg.Backend:
    return gg.Backend(name=options.pop("name", "gpu-local"), base_url=base_url, model="m",
                      api_key=KEY, transport=server.transport(), **options)


@pytest.fixture(autouse=True)
def _sdk_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


async def test_an_sdk_without_base_url_is_refused_unsent() -> None:
    """The newcomer's copy: the SDK (its default 2 retries) addresses api.openai.com; the
    refusal is typed, raised once, names both hosts and the fix, never the key; nothing is
    sent, booked or counted."""
    server = Server()
    async with gg.Gateway([_backend(server)]) as gate:
        client = openai.AsyncOpenAI(api_key=KEY, http_client=gate.http_client("gpu-local"))
        with pytest.raises(gg.BadRequestError) as caught:
            await client.chat.completions.create(model="m", messages=USER)
        stats = gate.stats()["gpu-local"]
        ledger = gate.ledger.entries.get("gpu-local")
    assert server.seen == []  # before the fix: ["https://api.openai.com:443"]
    error = caught.value
    assert isinstance(error, gg.MisaddressedRequestError) and error.unsent
    assert (error.backend, error.addressed, error.expected) == (
        "gpu-local", "https://api.openai.com:443", "http://gpu:8000")
    message = str(error)
    for part in ("'gpu-local'", "https://api.openai.com", "http://gpu:8000",
                 'base_url="http://gpu:8000/v1"'):
        assert part in message
    assert KEY not in message and KEY[:12] not in message
    assert stats.calls == 0 and (ledger is None or ledger.calls_ok == 0)


@pytest.mark.parametrize(("backend_url", "sdk_url"), [
    ("http://gpu:8000/v1", "http://gpu:8000/v1/"),  # a trailing slash
    ("http://gpu:8000/v1/", "http://GPU:8000/v1"),  # the host's case
    ("https://api.example.com/v1", "https://api.example.com:443/v1"),  # a default port
    ("http://gpu/v1", "http://gpu:80/v1"),
    ("http://gpu:8000/v1", "http://gpu:8000/other/v1"),  # the path is the SDK's business
])
async def test_the_backends_origin_however_written_is_sent(backend_url: str, sdk_url: str) -> None:
    server = Server()
    async with gg.Gateway([_backend(server, backend_url)]) as gate:
        client = openai.AsyncOpenAI(api_key=KEY, base_url=sdk_url, max_retries=0,
                                    http_client=gate.http_client("gpu-local"))
        await client.chat.completions.create(model="m", messages=USER)
    assert len(server.seen) == 1


@pytest.mark.parametrize("sdk_url", [
    "http://gpu:8001/v1",  # another port
    "https://gpu:8000/v1",  # another scheme
    "http://gpu.evil:8000/v1",  # another host
    "http://127.0.0.1:8000/v1",  # the same server, perhaps — but not the configured name
])
async def test_another_origin_is_refused(sdk_url: str) -> None:
    server = Server()
    async with gg.Gateway([_backend(server)]) as gate:
        client = openai.AsyncOpenAI(api_key=KEY, base_url=sdk_url, max_retries=0,
                                    http_client=gate.http_client("gpu-local"))
        with pytest.raises(gg.MisaddressedRequestError, match="nothing was sent"):
            await client.chat.completions.create(model="m", messages=USER)
    assert server.seen == []


async def test_no_credential_of_the_addressed_url_is_repeated() -> None:
    """User info and a query parameter may carry a key: the error names origins only."""
    server = Server()
    async with gg.Gateway([_backend(server)]) as gate:
        client = gate.http_client("gpu-local")
        with pytest.raises(gg.MisaddressedRequestError) as caught:
            await client.post("https://user:sk-leak-0123456789@api.example.com/v1/chat/"
                              "completions?key=sk-leak-9876543210", json={"messages": USER})
    assert "sk-leak" not in str(caught.value) and "user" not in caught.value.addressed
    assert server.seen == []


async def test_azure_endpoint_is_checked_by_its_origin() -> None:
    """``AsyncAzureOpenAI(azure_endpoint=...)`` builds ``/openai/deployments/{d}/...``; the
    ``/openai/v1`` API too: the resource's origin is what counts, and the fix names
    ``azure_endpoint=``."""
    server = Server()
    resource = "https://res.openai.azure.com"
    backend = _backend(server, resource, provider="azure", deployment="dep")
    async with gg.Gateway([backend]) as gate:
        for endpoint in (resource, resource + "/"):
            client = openai.AsyncAzureOpenAI(
                azure_endpoint=endpoint, api_key=KEY, api_version="2024-10-21", max_retries=0,
                http_client=gate.http_client("gpu-local"))
            await client.chat.completions.create(model="dep", messages=USER)
        v1 = openai.AsyncOpenAI(base_url=resource + "/openai/v1/", api_key=KEY, max_retries=0,
                                http_client=gate.http_client("gpu-local"))
        await v1.chat.completions.create(model="dep", messages=USER)
        other = openai.AsyncAzureOpenAI(
            azure_endpoint="https://other.openai.azure.com", api_key=KEY,
            api_version="2024-10-21", max_retries=0, http_client=gate.http_client("gpu-local"))
        with pytest.raises(gg.MisaddressedRequestError,
                           match=re.escape('azure_endpoint="https://res.openai.azure.com"')):
            await other.chat.completions.create(model="dep", messages=USER)
    assert server.seen == [resource] * 3


async def test_a_failover_client_neither_sends_nor_moves_a_misaddressed_request() -> None:
    """With ``fallback=``, a request to the primary's origin may be moved to b's URL; one
    addressed elsewhere is refused before either is tried."""
    a, b = Server(), Server()
    backends = [_backend(a, name="a"), _backend(b, "http://gpu-b:8000/v1", name="b")]
    async with gg.Gateway(backends) as gate:
        wrong = openai.AsyncOpenAI(api_key=KEY, max_retries=0,
                                   http_client=gate.http_client("a", fallback=["b"]))
        with pytest.raises(gg.MisaddressedRequestError, match=r"api\.openai\.com"):
            await wrong.chat.completions.create(model="m", messages=USER)
        right = openai.AsyncOpenAI(api_key=KEY, base_url="http://gpu:8000/v1", max_retries=0,
                                   http_client=gate.http_client("a", fallback=["b"]))
        await right.chat.completions.create(model="m", messages=USER)
    assert (a.seen, b.seen) == (["http://gpu:8000"], [])


async def test_the_anthropic_sdk_without_base_url_is_refused() -> None:
    """The anthropic SDK wraps whatever its transport raises: ``APIConnectionError``, the
    refusal its ``__cause__``."""
    server = Server()
    backend = _backend(server, "http://claude-proxy:9000/v1/", provider="anthropic")
    async with gg.Gateway([backend]) as gate:
        client = anthropic.AsyncAnthropic(api_key=KEY, max_retries=0,
                                          http_client=gate.http_client("gpu-local"))
        with pytest.raises(anthropic.APIConnectionError) as caught:
            await client.messages.create(model="m", max_tokens=5, messages=USER)
    cause = caught.value.__cause__
    assert isinstance(cause, gg.MisaddressedRequestError)
    assert "https://api.anthropic.com" in str(cause)
    assert 'base_url="http://claude-proxy:9000"' in str(cause)
    assert server.seen == []


def test_the_sync_client_is_refused_too() -> None:
    server = Server()
    with gg.SyncGateway(backends=[_backend(server)]) as gate:
        client = openai.OpenAI(api_key=KEY, max_retries=0,
                               http_client=gate.http_client("gpu-local"))
        with pytest.raises(gg.MisaddressedRequestError):
            client.chat.completions.create(model="m", messages=USER)
    assert server.seen == []


async def test_under_a_guard_it_is_the_callers_mistake_not_the_backends() -> None:
    """A guarded body's misaddressed request: raised as it is, not retried, and no failure
    on the backend's circuit."""
    server = Server()
    async with gg.Gateway([_backend(server)], breaker_threshold=1) as gate:
        client = openai.AsyncOpenAI(api_key=KEY, max_retries=0,
                                    http_client=gate.http_client("gpu-local"))
        tries = 0

        @gate.guard(backend="gpu-local")
        async def ask() -> object:
            nonlocal tries
            tries += 1
            return await client.chat.completions.create(model="m", messages=USER)

        with pytest.raises(gg.MisaddressedRequestError):
            await ask()
        stats = gate.stats()["gpu-local"]
    assert (tries, server.seen, stats.failures, stats.circuit) == (1, [], 0, "closed")
