"""A prompt Azure's content filter refuses is billed: the ledger books it.

Azure answers such a prompt with a 400 whose code is ``content_filter``, and its content
filtering page says: "When content filtering is triggered for a prompt and a "status": 400 is
received as part of the response there will be a charge for this request as the prompt was
evaluated by the service." Before, gptgate booked nothing for it — 10 filtered prompts of
~250 tokens: 0 tokens and $0 in the ledger, ``stats()`` and ``r.billed_usage`` of no call,
while the resource billed ~2,500 prompt tokens. Now each is booked at its prompt (estimated,
as any billed failure whose usage the server did not state), not retried, and not counted
against the deployment's health: the prompt, not the backend, was refused.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx2
import pytest

import gptgate as gg

SEVERITY = {"filtered": False, "severity": "safe"}
FILTERED = {"error": {
    "message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
               "management policy. Please modify your prompt and retry.",
    "type": None, "param": "prompt", "code": "content_filter", "status": 400,
    "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
        "hate": {"filtered": True, "severity": "high"}, "self_harm": SEVERITY,
        "sexual": SEVERITY, "violence": SEVERITY}},
}}
PRICE = gg.Price(input_per_mtok=2.5, output_per_mtok=10.0)


def _azure(hits: Counter[str], body: dict[str, Any]) -> gg.Backend:
    def answer(request: httpx2.Request) -> httpx2.Response:
        hits["sent"] += 1
        return httpx2.Response(400, json=body)

    return gg.Backend(name="az", provider="azure", base_url="http://127.0.0.1:9",
                      deployment="gpt-4o", api_key="k", price=PRICE,
                      transport=httpx2.MockTransport(answer))


async def test_a_filtered_prompt_is_booked_at_its_prompt_and_not_retried() -> None:
    hits: Counter[str] = Counter()
    prompt = [{"role": "user", "content": "a prompt the filter refuses " * 40}]
    async with gg.Gateway([_azure(hits, FILTERED)], max_attempts=3) as gate:
        for _ in range(10):
            with pytest.raises(gg.BadRequestError) as caught:
                await gate.chat(prompt)
            assert caught.value.billed and not caught.value.retryable
        entry = gate.ledger.entries["az"]
        stats = gate.stats()["az"]
    assert hits["sent"] == 10
    assert 200 <= entry.input_tokens / 10 <= 320 and entry.output_tokens == 0  # ~250 each
    assert entry.cost_usd == pytest.approx(entry.input_tokens * 2.5 / 1e6)
    assert stats.circuit == "closed"


async def test_another_400_is_still_booked_at_nothing() -> None:
    hits: Counter[str] = Counter()
    bad = {"error": {"message": "Unrecognized request argument supplied: foo", "type":
                     "invalid_request_error", "param": None, "code": None}}
    async with gg.Gateway([_azure(hits, bad)]) as gate:
        with pytest.raises(gg.BadRequestError) as caught:
            await gate.chat([{"role": "user", "content": "hi"}])
        entry = gate.ledger.entries["az"]
    assert not caught.value.billed and entry.input_tokens == 0 and entry.cost_usd == 0
