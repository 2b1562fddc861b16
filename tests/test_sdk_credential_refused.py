"""A refused key (401/403) on the SDK and guard paths counts against the backend's circuit
when the key refused is the backend's own, as it does on ``gate.chat``
(gptgate/credential_failover.py).

Before, an SDK on ``gate.http_client("primary")`` whose key was revoked put every request on
the revoked backend — 20 of 20 here, and ``@gate.guard`` (async and sync) around it the same:
a 401 was the SDK's own error, never counted, so the circuit never opened and ``gate.chat``
kept routing there too until its own calls opened it. Now the circuit opens after
``breaker_threshold`` refusals: later SDK requests are refused unsent (a 503 naming the 401),
and routed calls go to the healthy fallback.

A request carrying a key other than the backend's (a per-tenant SDK client) was refused for
*its* key: it blames no backend, as a ``gate.chat`` call's own ``extra_headers`` key does.
Real ``openai`` package, real loopback servers that check the bearer key.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx2
import openai
import pytest

import gptgate as gg
from benchmarks._keyserver import KeyServer, key_server

REVOKED = "sk-proj-revoked-0123456789abcdef"  # primary's key, revoked at the provider
ROTATED = "sk-proj-rotated-aaaabbbbccccdddd"  # the key primary accepts now
FALLBACK = "sk-proj-fallback-fedcba9876543210"
TENANT = "sk-tenant-9999888877776666"
USER = [{"role": "user", "content": "hi"}]
THRESHOLD = 3


@contextmanager
def _servers(status: int = 401, primary_key: str = REVOKED) -> Iterator[
    tuple[KeyServer, KeyServer, list[gg.Backend]]
]:
    """primary accepts only ROTATED (its configured key, ``primary_key``, is refused unless
    it is ROTATED); fallback accepts its own key. primary is the faster tier: the router
    prefers it while its circuit is closed."""
    with ExitStack() as stack:
        primary = stack.enter_context(key_server(ROTATED, status))
        fallback = stack.enter_context(key_server(FALLBACK, status))
        backends = [
            gg.Backend(name="primary", base_url=primary.url, model="m", hardware="tpu",
                       api_key=primary_key),
            gg.Backend(name="fallback", base_url=fallback.url, model="m", hardware="cpu",
                       api_key=FALLBACK),
        ]
        yield primary, fallback, backends


def _gate(backends: list[gg.Backend]) -> gg.Gateway:
    return gg.Gateway(backends, breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0,
                      max_breaker_wait_s=0.0)


def _sdk(gate: gg.Gateway, url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=key, base_url=url, max_retries=0,
                              http_client=gate.http_client("primary"))


@pytest.mark.parametrize("status", [401, 403])
async def test_an_sdks_refused_key_opens_the_backends_circuit(status: int) -> None:
    with _servers(status) as (primary, fallback, backends):
        gate = _gate(backends)
        async with gate:
            client = _sdk(gate, primary.url, REVOKED)
            errors: list[openai.APIStatusError] = []
            for _ in range(20):
                with pytest.raises(openai.APIStatusError) as caught:
                    await client.chat.completions.create(model="m", messages=USER)
                errors.append(caught.value)
            assert gate.stats()["primary"].circuit == "open"
            routed = await gate.chat(USER)  # the router no longer sends there
    assert primary.requests == THRESHOLD  # 20 before: every request hit the revoked key
    assert [e.status_code for e in errors] == [status] * THRESHOLD + [503] * (20 - THRESHOLD)
    assert "circuit is open" in str(errors[-1]) and f"[{status}]" in str(errors[-1])
    assert routed.backend == "fallback" and fallback.answered == 1
    assert not any(REVOKED in str(e) or REVOKED[8:] in str(e) for e in errors)


async def test_a_tenants_refused_key_blames_no_backend() -> None:
    with _servers(primary_key=ROTATED) as (primary, _, backends):
        gate = _gate(backends)
        async with gate:
            tenant = _sdk(gate, primary.url, TENANT)
            for _ in range(10):
                with pytest.raises(openai.AuthenticationError):
                    await tenant.chat.completions.create(model="m", messages=USER)
            assert gate.stats()["primary"].circuit == "closed"
            answer = await _sdk(gate, primary.url, ROTATED).chat.completions.create(
                model="m", messages=USER
            )
    assert answer.choices[0].message.content == "ok"
    assert primary.refused == 10 and primary.answered == 1


async def test_a_guarded_sdk_calls_refused_key_opens_the_circuit() -> None:
    with _servers() as (primary, _, backends):
        gate = _gate(backends)
        async with gate:
            client = _sdk(gate, primary.url, REVOKED)

            @gate.guard(backend="primary")
            async def ask() -> str:
                answer = await client.chat.completions.create(model="m", messages=USER)
                return answer.choices[0].message.content or ""

            for _ in range(10):
                with pytest.raises((openai.APIStatusError, gg.BackendError)):
                    await ask()
            assert gate.stats()["primary"].circuit == "open"
    assert primary.requests == THRESHOLD  # 10 before


@pytest.mark.parametrize("key", [REVOKED, TENANT])
async def test_a_guarded_functions_own_client_counts_the_backends_key_only(key: str) -> None:
    """A legacy function on its own HTTP client: the refused request rides on the error
    (``HTTPStatusError.request``), so the guard sees whose key it carried."""
    with _servers() as (primary, _, backends):
        gate = _gate(backends)
        async with gate, httpx2.AsyncClient(
            base_url=primary.url, headers={"authorization": f"Bearer {key}"}
        ) as own:

            @gate.guard(backend="primary")
            async def ask() -> object:
                response = await own.post("/chat/completions", json={"model": "m",
                                                                      "messages": USER})
                response.raise_for_status()
                return response.json()

            for _ in range(10):
                with pytest.raises((httpx2.HTTPStatusError, gg.BackendError)):
                    await ask()
            circuit = gate.stats()["primary"].circuit
    if key == REVOKED:
        assert (primary.requests, circuit) == (THRESHOLD, "open")  # 10, closed before
    else:
        assert (primary.requests, circuit) == (10, "closed")


def test_a_sync_guarded_sdk_calls_refused_key_opens_the_circuit() -> None:
    with _servers() as (primary, _, backends), gg.SyncGateway(
        backends, breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0, max_breaker_wait_s=0.0
    ) as gate:
        client = openai.OpenAI(api_key=REVOKED, base_url=primary.url, max_retries=0,
                               http_client=gate.http_client("primary"))

        @gate.guard(backend="primary")
        def ask() -> str:
            answer = client.chat.completions.create(model="m", messages=USER)
            return answer.choices[0].message.content or ""

        failed: list[BaseException] = []

        def caller() -> None:
            for _ in range(10):
                try:
                    ask()
                except (openai.APIStatusError, gg.BackendError) as error:
                    failed.append(error)

        thread = threading.Thread(target=caller, daemon=True)
        thread.start()
        thread.join(30)
        assert not thread.is_alive()
        circuit = gate.stats()["primary"].circuit
        routed = gate.chat(USER)
    assert len(failed) == 10
    assert (primary.requests, circuit) == (THRESHOLD, "open")  # 10, closed before
    assert routed.backend == "fallback"


async def test_a_refusal_off_the_served_endpoints_blames_no_backend() -> None:
    """A restricted key may lack a scope (``api.files.read``: 401/403 on ``/files``) and
    still serve chat: only a refusal on an endpoint the backend serves for the gateway (chat,
    completions, embeddings, responses, messages) counts towards its circuit."""
    with _servers(403) as (primary, _, backends):
        gate = _gate(backends)
        async with gate:
            client = _sdk(gate, primary.url, REVOKED)
            for _ in range(5):
                with pytest.raises(openai.PermissionDeniedError):
                    await client.files.list()
            assert gate.stats()["primary"].circuit == "closed"
    assert primary.refused == 5


@pytest.mark.parametrize(("provider", "sent", "backends"), [
    ("openai", {"Authorization": f"Bearer {REVOKED}"}, True),
    ("openai", {"authorization": f"Bearer {TENANT}"}, False),
    ("openai", {}, False),  # the backend has a key; a request without one is not refused it
    ("anthropic", {"x-api-key": REVOKED}, True),
    ("anthropic", {"x-api-key": TENANT}, False),
    # the anthropic package (2.x) sends api_key as a bearer token: the same key
    ("anthropic", {"Authorization": f"Bearer {REVOKED}"}, True),
    ("anthropic", {"Authorization": f"Bearer {TENANT}"}, False),
    ("anthropic", {"x-api-key": REVOKED, "Authorization": f"Bearer {TENANT}"}, False),
])
async def test_whose_key_a_request_carried(
    provider: str, sent: dict[str, str], backends: bool
) -> None:
    from gptgate.credential_owner import carries_backends_key

    gate = gg.Gateway([gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m",
                                  provider=provider, api_key=REVOKED)])
    async with gate:
        assert carries_backends_key(gate.backend_state("b"), sent) is backends


async def test_a_keyless_backends_own_is_no_key() -> None:
    from gptgate.credential_owner import carries_backends_key

    backend = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m",
                         api_key_env="GPTGATE_TEST_UNSET_KEY")
    async with gg.Gateway([backend]) as gate:
        state = gate.backend_state("b")
        assert carries_backends_key(state, {})
        assert not carries_backends_key(state, {"authorization": f"Bearer {TENANT}"})
