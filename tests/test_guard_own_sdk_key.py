"""A 401 to ``openai``'s own client (not on ``gate.http_client``) inside ``@gate.guard``.

openai 3.x adds its key to the request in an auth step after building it: the exception's
request carries no key, so the guard cannot tell the backend's own key (its circuit's
business) from a tenant's (nobody's: one user's wrong key must not open the circuit for all).
It does not guess: the circuit does not count the refusal. But the refusal no longer passes
in silence — before, 10 refused calls said nothing and the circuit stayed closed with no word
why: the SDK's exception carries a note (PEP 678) and the log a WARNING, once per backend,
naming the backend whose server refused and what to do (put the SDK on
``gate.http_client(name)``, where the key is seen), never the key (gptgate/guard_unseen_key.py).
"""

from __future__ import annotations

import logging

import httpx2
import openai
import pytest

from tests.test_sdk_failover import A_KEY, B_KEY, BAD_KEY, USER, _gate, server


@pytest.mark.parametrize("pinned", [True, False])
async def test_a_refusal_of_a_key_the_guard_cannot_see_says_what_to_do(
    pinned: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gptgate")
    with server(B_KEY) as b, server(A_KEY, refusal=BAD_KEY) as a:
        gate = _gate(f"{a.url}/v1", b)
        async with gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=f"{a.url}/v1", max_retries=0)

            @gate.guard(backend="a" if pinned else None, private=False, retry=False)
            async def ask() -> object:
                return await sdk.chat.completions.create(model="model-a", messages=USER)

            errors = []
            for _ in range(4):
                with pytest.raises(openai.AuthenticationError) as caught:
                    await ask()
                errors.append(caught.value)
            circuit = gate.stats()["a"].circuit
    notes = [getattr(e, "__notes__", []) for e in errors]
    assert all(len(n) == 1 for n in notes)
    note = notes[0][0]
    assert "backend 'a'" in note and "gate.http_client('a')" in note
    warnings = [r.getMessage() for r in caplog.records if "gate.http_client('a')" in r.getMessage()]
    assert warnings == [note]  # once per backend, the same words
    text = " ".join([note, caplog.text, *(str(e) for e in errors)])
    assert A_KEY not in text and A_KEY[-8:] not in text and B_KEY not in text
    assert circuit == "closed"  # the key is unknown: no circuit counts it (a tenant's would not)
    assert len(b.seen) == 0 and len(a.seen) == (4 if pinned else len(a.seen))


async def test_a_key_the_guard_saw_as_a_tenants_gets_no_note() -> None:
    """A refused request carrying its key in sight — another's than the backend's — is a
    tenant's: no note, no count (as before). (openai 3.x's own client shows no key even when
    given in ``default_headers``: it gets the note, which says gptgate cannot tell.)"""
    with server(B_KEY) as b, server(A_KEY) as a:
        gate = _gate(f"{a.url}/v1", b)
        async with gate, httpx2.AsyncClient(
            base_url=f"{a.url}/v1", headers={"authorization": "Bearer sk-tenant-000"}
        ) as own:

            @gate.guard(backend="a", retry=False)
            async def ask() -> object:
                response = await own.post("/chat/completions",
                                          json={"model": "model-a", "messages": USER})
                response.raise_for_status()
                return response.json()

            with pytest.raises(httpx2.HTTPStatusError) as caught:
                await ask()
            circuit = gate.stats()["a"].circuit
    assert not getattr(caught.value, "__notes__", None)
    assert circuit == "closed" and len(a.seen) == 1
