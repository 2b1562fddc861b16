"""An SDK request too long for the primary's context window goes to a ``fallback=`` backend.

``gate.chat`` moves a prompt the server refused as too long for its window to a backend with a
larger one (gptgate/context_failover.py); an SDK on ``gate.http_client("small",
fallback=["large"])`` got the small server's 400 — the fallback was only for a primary that
cannot serve at all. The refusal says the prompt can never fit *there*; nothing ran, nothing
was billed, so the request goes to the next fallback, as ``gate.chat``'s call does, and never
opens the primary's circuit. Any other 400 is still the SDK's answer. Real ``openai``
package, loopback servers (the llama-server's and OpenAI's exact refusal bodies).
"""

from __future__ import annotations

import json

import openai
import pytest

import gptgate as gg
from tests.test_context_exceeded import LLAMA_BODY, OPENAI_BODY
from tests.test_sdk_failover import A_KEY, B_KEY, BAD_REQUEST, USER, server


def _gate(small_url: str, large_url: str) -> gg.Gateway:
    return gg.Gateway(
        [gg.Backend(name="small", base_url=small_url, model="model-a", api_key=A_KEY),
         gg.Backend(name="large", base_url=large_url, model="model-b", api_key=B_KEY)],
        breaker_threshold=3, breaker_cooldown_s=600.0, deadline_s=30.0,
    )


@pytest.mark.parametrize("body", [LLAMA_BODY, OPENAI_BODY], ids=["llama-server", "openai"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_prompt_too_long_for_the_primary_goes_to_the_fallback(
    body: bytes, stream: bool
) -> None:
    refusal = (400, json.loads(body))
    with server(A_KEY, refusal=refusal) as small, server(B_KEY) as large:
        gate = _gate(f"{small.url}/v1", f"{large.url}/v1")
        async with gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=f"{small.url}/v1", max_retries=0,
                                     http_client=gate.http_client("small", fallback=["large"]))
            for _ in range(4):  # past the breaker's threshold: no circuit opens for it
                if stream:
                    answer = await sdk.chat.completions.create(
                        model="model-a", messages=USER, stream=True)
                    text = "".join([c.choices[0].delta.content or "" async for c in answer
                                    if c.choices])
                    assert text == "first "
                else:
                    answer = await sdk.chat.completions.create(model="model-a", messages=USER)
                    assert answer.choices[0].message.content == "ok"
            stats, entries = gate.stats(), gate.ledger.entries
            assert stats["small"].circuit == "closed"
            assert (entries["large"].calls_ok, entries["small"].calls_failed) == (4, 0)
    assert len(small.seen) == 4
    assert [s.model for s in large.seen] == ["model-b"] * 4


async def test_another_bad_request_is_still_the_sdks_answer() -> None:
    with server(A_KEY, refusal=BAD_REQUEST) as small, server(B_KEY) as large:
        gate = _gate(f"{small.url}/v1", f"{large.url}/v1")
        async with gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=f"{small.url}/v1", max_retries=0,
                                     http_client=gate.http_client("small", fallback=["large"]))
            with pytest.raises(openai.BadRequestError):
                await sdk.chat.completions.create(model="model-a", messages=USER)
    assert large.seen == []


async def test_too_long_for_every_backend_the_sdk_gets_the_primarys_refusal() -> None:
    refusal = (400, json.loads(LLAMA_BODY))
    with server(A_KEY, refusal=refusal) as small, server(B_KEY, refusal=refusal) as large:
        gate = _gate(f"{small.url}/v1", f"{large.url}/v1")
        async with gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=f"{small.url}/v1", max_retries=0,
                                     http_client=gate.http_client("small", fallback=["large"]))
            with pytest.raises(openai.BadRequestError, match="2048"):
                await sdk.chat.completions.create(model="model-a", messages=USER)
            entries = gate.ledger.entries  # one failed call (at its last try's backend)
            assert entries["small"].calls_failed + entries["large"].calls_failed == 1
    assert (len(small.seen), len(large.seen)) == (1, 1)
