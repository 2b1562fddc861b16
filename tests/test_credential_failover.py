"""A backend that refuses its credentials (401/403: a revoked or rotated key) is the backend's
failure, not the call's: the call moves to another eligible backend it has not tried, at no
retry cost, and the refusals count towards the backend's circuit, so later calls stop paying
a round trip to the dead key. Before, with a healthy fallback configured, 200 of 200 calls
failed with the primary's 401 and the fallback got none: a 401 was a ``BadRequestError``,
never moved and never counted against the backend, so the router kept choosing it.

A call that carries its own credential (``extra_headers`` with ``Authorization``, a tenant's
key) is refused for *its* key: it is neither moved nor counted against the backend."""

from __future__ import annotations

from collections import Counter

import httpx2
import pytest

import gptgate as gg

BODY = {"id": "c", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
MESSAGES = [{"role": "user", "content": "hi"}]


def _backends(hits: Counter[str], status: int = 401) -> list[gg.Backend]:
    def revoked(request: httpx2.Request) -> httpx2.Response:
        hits["primary"] += 1
        return httpx2.Response(status, json={"error": {
            "message": "Incorrect API key provided: sk-proj-abc***xyz.", "code": "invalid_api_key",
        }})

    def good(request: httpx2.Request) -> httpx2.Response:
        hits["fallback"] += 1
        return httpx2.Response(200, json=BODY)

    # the primary is the faster tier, so the router prefers it while its circuit is closed
    return [
        gg.Backend(name="primary", base_url="http://127.0.0.1:9/v1", model="m", hardware="tpu",
                   api_key="sk-proj-abcdefghijklmnopqrstuvwxyz",
                   transport=httpx2.MockTransport(revoked)),
        gg.Backend(name="fallback", base_url="http://127.0.0.1:9/v1", model="m", hardware="cpu",
                   api_key="EMPTY", transport=httpx2.MockTransport(good)),
    ]


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_fails_over_and_opens_its_circuit(status: int) -> None:
    hits: Counter[str] = Counter()
    gate = gg.Gateway(_backends(hits, status), breaker_threshold=3, breaker_cooldown_s=60.0)
    async with gate:
        results = [await gate.chat(MESSAGES) for _ in range(20)]
        stats = gate.stats()
    assert {r.backend for r in results} == {"fallback"}
    assert hits["fallback"] == 20
    assert 1 <= hits["primary"] <= 3  # at most until its circuit opens
    assert stats["fallback"].retries == hits["primary"]  # the moves, free of the retry budget


async def test_a_refused_key_opens_its_circuit_and_the_error_says_why() -> None:
    hits: Counter[str] = Counter()
    gate = gg.Gateway(_backends(hits)[:1], breaker_threshold=3, breaker_cooldown_s=60.0,
                      max_breaker_wait_s=0.0)
    async with gate:
        for _ in range(3):
            with pytest.raises(gg.BadRequestError):
                await gate.chat(MESSAGES)
        with pytest.raises(gg.BackendError) as caught:  # not sent: the key is known refused
            await gate.chat(MESSAGES)
        assert gate.stats()["primary"].circuit == "open"
    assert hits == {"primary": 3}
    assert "primary last failed [401]: authentication failed" in caught.value.message


async def test_a_pinned_call_gets_the_typed_refusal() -> None:
    hits: Counter[str] = Counter()
    gate = gg.Gateway(_backends(hits), breaker_threshold=3, breaker_cooldown_s=60.0)
    async with gate:
        with pytest.raises(gg.BadRequestError) as caught:
            await gate.chat(MESSAGES, backend="primary")
    assert caught.value.status == 401 and caught.value.backend == "primary"
    assert "abcdefghij" not in str(caught.value)
    assert hits == {"primary": 1}


async def test_a_calls_own_key_refused_blames_neither_backend() -> None:
    hits: Counter[str] = Counter()
    gate = gg.Gateway(_backends(hits), breaker_threshold=3, breaker_cooldown_s=60.0)
    own = {"Authorization": "Bearer sk-tenant-0123456789abcdef"}
    async with gate:
        for _ in range(5):
            with pytest.raises(gg.BadRequestError):
                await gate.chat(MESSAGES, backend="primary", extra_headers=own)
        stats = gate.stats()
    assert hits == {"primary": 5}
    assert stats["primary"].circuit == "closed"
