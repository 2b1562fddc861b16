"""SDK failover under ``@gate.guard`` and in ``stats()``: a guard pinned with ``backend="a"``
around a client built by ``gate.http_client("a", fallback=["b"])`` follows the client's
failover once a's circuit opens (the guard pins the call site, the client carries the
failover policy: gptgate/guard_site.py), and a fallback's try is counted as a retry on the
backend it went to, as ``gate.chat``'s failover is (gptgate/sdk_failover.py).

Before, the pinned guard refused every call once a's circuit opened — ``BackendError``, the
request never reaching b — and ``stats()["b"].retries`` stayed 0 after six failovers while
``gate.chat``'s six counted six. Real ``openai`` package, loopback servers checking the key.
"""

from __future__ import annotations

import openai
import pytest

import gptgate as gg
from benchmarks._keyserver import tag
from tests.test_sdk_failover import A_KEY, B_KEY, BAD_KEY, USER, _gate, _primary, _sdk, server


@pytest.mark.parametrize("kind", ["dead", "refused-key"])
async def test_a_pinned_guard_follows_its_clients_failover_once_the_circuit_opens(
    kind: str,
) -> None:
    with server(B_KEY) as b, _primary(kind) as (a_url, a):
        gate = _gate(a_url, b)
        async with gate:
            sdk = _sdk(gate, a_url)

            @gate.guard(backend="a")
            async def ask() -> str:
                answer = await sdk.chat.completions.create(model="model-a", messages=USER)
                return answer.choices[0].message.content or ""

            got = [await ask() for _ in range(6)]
            assert gate.stats()["a"].circuit == "open"
            ledger = gate.ledger.entries
            assert ledger["b"].calls_ok == 6 and ledger["b"].input_tokens == 18
    assert got == ["ok"] * 6
    if a is not None:  # the circuit opened after 3 refusals: no more were sent to a
        assert len(a.seen) == 3
    assert [(s.key, s.model) for s in b.seen] == [(tag(B_KEY), "model-b")] * 6


async def test_a_pinned_guard_whose_client_has_no_fallback_is_still_refused() -> None:
    """The pin holds for a client without ``fallback=``: a's open circuit refuses the call."""
    with server(B_KEY) as b, server(A_KEY, refusal=BAD_KEY) as a:
        gate = _gate(f"{a.url}/v1", b)
        async with gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=f"{a.url}/v1", max_retries=0,
                                     http_client=gate.http_client("a"))

            @gate.guard(backend="a", retry=False)
            async def ask() -> str:
                answer = await sdk.chat.completions.create(model="model-a", messages=USER)
                return answer.choices[0].message.content or ""

            for _ in range(3):
                with pytest.raises(openai.AuthenticationError):
                    await ask()
            with pytest.raises(gg.BackendError, match="circuit"):
                await ask()
    assert len(a.seen) == 3 and b.seen == []
@pytest.mark.parametrize("kind", ["sdk", "chat"])
async def test_a_failover_try_counts_as_a_retry_on_the_backend_it_went_to(kind: str) -> None:
    """Each request a refused (sent, then failed over) is one retry on b, as on gate.chat's
    path; one moved past a's open circuit, never sent to a, is b's first try (gate.chat
    routes those to b at once). The SDK's: 3 refusals, then 3 moved past the circuit."""
    with server(B_KEY) as b, server(A_KEY, refusal=BAD_KEY) as a:
        gate = _gate(f"{a.url}/v1", b)
        async with gate:
            sdk = _sdk(gate, f"{a.url}/v1")
            for _ in range(6):
                if kind == "sdk":
                    await sdk.chat.completions.create(model="model-a", messages=USER)
                else:
                    await gate.chat(USER)
            stats = gate.stats()
    assert len(b.seen) == 6 and len(a.seen) == (3 if kind == "sdk" else 1)
    assert (stats["a"].retries, stats["b"].retries) == (0, len(a.seen))
