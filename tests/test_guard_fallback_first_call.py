"""A guard pinned to a backend follows its SDK client's ``fallback=`` from its first call.

``@gate.guard(backend="a")`` around the official openai SDK on
``gate.http_client("a", fallback=["b"])``: once a's circuit is open, the guard routes its try
to b, as the client sends (gptgate/guard_site.py). The call site learnt the client's order only
from a request it had seen, so when a's circuit opened before the site's first request (other
traffic, another call site, ``gate.chat``), its first call was refused with
``CircuitOpenError`` though b was healthy — at every new call site, after every restart of a
worker that met a dead primary. Now the order comes from the clients the gateway made for a:
when every one of them fails over the same way, the guard follows it before it has seen one.
Real ``openai`` package, loopback servers checking the key.
"""

from __future__ import annotations

import openai
import pytest

import gptgate as gg
from benchmarks._keyserver import tag
from tests.test_sdk_failover import A_KEY, B_KEY, USER, _gate, _sdk, dead_url, server


async def _open_as_circuit(gate: gg.Gateway) -> None:
    """Other traffic (gate.chat pinned to a) opens a's circuit: 3 refused connections."""
    for _ in range(3):
        with pytest.raises(gg.GateError):
            await gate.chat(USER, backend="a", max_attempts=1)
    assert gate.stats()["a"].circuit == "open"


@pytest.mark.parametrize("retry", [True, False])
async def test_a_new_pinned_call_site_follows_the_clients_fallback_at_its_first_call(
    retry: bool,
) -> None:
    with server(B_KEY) as b, dead_url() as a_url:
        gate = _gate(a_url, b)
        async with gate:
            sdk = _sdk(gate, a_url)
            await _open_as_circuit(gate)

            @gate.guard(backend="a", retry=retry)
            async def ask() -> str:
                answer = await sdk.chat.completions.create(model="model-a", messages=USER)
                return answer.choices[0].message.content or ""

            assert await ask() == "ok"  # before: CircuitOpenError, b never asked
            assert await ask() == "ok"
            entries = gate.ledger.entries
            assert entries["b"].calls_ok == 2
    assert [(s.key, s.model) for s in b.seen] == [(tag(B_KEY), "model-b")] * 2


async def test_the_sync_gateway_guard_follows_it_too() -> None:
    with server(B_KEY) as b, dead_url() as a_url:
        backends = _gate(a_url, b).config.backends
        gate = gg.SyncGateway(backends=backends, breaker_threshold=3, breaker_cooldown_s=600.0,
                              max_breaker_wait_s=0.0, deadline_s=30.0)
        with gate:
            sdk = openai.OpenAI(api_key=A_KEY, base_url=a_url, max_retries=0,
                                http_client=gate.http_client("a", fallback=["b"]))
            for _ in range(3):
                with pytest.raises(gg.GateError):
                    gate.chat(USER, backend="a", max_attempts=1)

            @gate.guard(backend="a")
            def ask() -> str:
                answer = sdk.chat.completions.create(model="model-a", messages=USER)
                return answer.choices[0].message.content or ""

            assert ask() == "ok"
    assert len(b.seen) == 1


async def test_clients_that_disagree_leave_the_pin_as_it_was() -> None:
    """A client for a without ``fallback=`` next to one with it: the guard cannot tell which
    its body uses until it has seen a request, so a's open circuit refuses its first call, as
    before (never a guess that would book a's failures on b)."""
    with server(B_KEY) as b, dead_url() as a_url:
        gate = _gate(a_url, b)
        async with gate:
            sdk = _sdk(gate, a_url)
            gate.http_client("a")  # another call site's client: no fallback
            await _open_as_circuit(gate)

            @gate.guard(backend="a", retry=False)
            async def ask() -> str:
                answer = await sdk.chat.completions.create(model="model-a", messages=USER)
                return answer.choices[0].message.content or ""

            with pytest.raises(gg.BackendError, match="circuit"):
                await ask()
    assert b.seen == []


async def test_a_body_on_its_own_client_is_not_guessed_twice_nor_blamed_on_the_fallback() -> None:
    """Every client the gateway made for a fails over to b, but this call site's body uses an
    SDK client of its own, straight to a: its first call, routed to b by the clients made,
    sends to a and fails as the SDK does — a failure of a's, none of b's (b's circuit and
    limit never see it) — and the site follows no guess again: its next call is refused by
    a's open circuit, as before, without a request."""
    with server(B_KEY) as b, dead_url() as a_url:
        gate = _gate(a_url, b)
        async with gate:
            _sdk(gate, a_url)  # another call site's client, with fallback=["b"]
            await _open_as_circuit(gate)
            own = openai.AsyncOpenAI(api_key=A_KEY, base_url=a_url, max_retries=0)

            @gate.guard(backend="a", retry=False)
            async def ask() -> str:
                answer = await own.chat.completions.create(model="model-a", messages=USER)
                return answer.choices[0].message.content or ""

            with pytest.raises(openai.APIConnectionError):
                await ask()
            with pytest.raises(gg.BackendError, match="circuit"):
                await ask()
            stats = gate.stats()["b"]
            assert (stats.failures, stats.in_flight, stats.circuit) == (0, 0, "closed")
            assert gate.ledger.entries["a"].calls_failed == 3 + 2
            await own.close()
    assert b.seen == []


async def test_clients_of_two_orders_that_send_to_the_same_fallback_are_followed() -> None:
    """``fallback=["b"]`` and ``fallback=["b", "a2"]``: both send to b while it is up."""
    with server(B_KEY) as b, dead_url() as a_url, dead_url() as other_url:
        backends = [*_gate(a_url, b).config.backends,
                    gg.Backend(name="a2", base_url=other_url, model="model-b", api_key=B_KEY)]
        gate = gg.Gateway(backends, breaker_threshold=3, breaker_cooldown_s=600.0,
                          max_breaker_wait_s=0.0, deadline_s=30.0)
        async with gate:
            sdk = _sdk(gate, a_url)
            gate.http_client("a", fallback=["b", "a2"])
            await _open_as_circuit(gate)

            @gate.guard(backend="a")
            async def ask() -> str:
                answer = await sdk.chat.completions.create(model="model-a", messages=USER)
                return answer.choices[0].message.content or ""

            assert await ask() == "ok"
    assert len(b.seen) == 1
