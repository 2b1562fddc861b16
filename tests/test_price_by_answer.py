"""An Azure deployment configured the way the docs show it — ``deployment="gpt-4o-prod"`` and
no ``model=`` — is priced from the model its answers name (``gpt-4o-2024-08-06``), which the
genai-prices table knows, instead of costing $0: the deployment's own name is no model the
table could know. Before, every call of such a backend cost $0 in the ledger, ``r.cost_usd``
and the spans, with one INFO line at start that a default logging setup never shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.prices import catalog_price
from gptgate.results import Usage
from tests.mockbackend import Script, gateway

pytest.importorskip("genai_prices")

ENDPOINT = "https://res.openai.azure.com"


def _answer(model: str) -> httpx2.Response:
    body: dict[str, Any] = {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500},
    }
    return httpx2.Response(200, json=body)


def _azure(script: Script) -> gg.Backend:
    return gg.Backend(
        name="az", provider="azure", base_url=ENDPOINT, deployment="gpt-4o-prod",
        api_key="k", concurrency=2, transport=httpx2.MockTransport(script),
    )


def _listed(model: str) -> float:
    found = catalog_price("azure", model, ENDPOINT)
    assert found is not None
    return found.at(datetime.now(UTC)).cost(Usage(input_tokens=1000, output_tokens=500))


async def test_a_deployment_named_backend_is_priced_by_its_answers_model() -> None:
    backend = _azure(Script(_answer("gpt-4o-2024-08-06")))
    assert backend.model == "gpt-4o-prod"  # the deployment's name: the table has no such model
    async with gateway(backend) as gate:
        first = await gate.chat([{"role": "user", "content": "hi"}])
        second = await gate.chat([{"role": "user", "content": "again"}])
        assert first.cost_usd == pytest.approx(_listed("gpt-4o")) and first.cost_usd > 0
        assert second.cost_usd == pytest.approx(first.cost_usd)
        assert gate.ledger.entries["az"].cost_usd == pytest.approx(2 * first.cost_usd)
        assert gate.ledger.price("az") is not None


async def test_sdk_requests_on_http_client_are_priced_the_same_way() -> None:
    backend = _azure(Script(_answer("gpt-4o-mini-2024-07-18")))
    async with gateway(backend) as gate:
        client = openai.AsyncAzureOpenAI(
            azure_endpoint=ENDPOINT, api_version="2024-10-21", api_key="k",
            http_client=gate.http_client("az"), max_retries=0,
        )
        await client.chat.completions.create(
            model="gpt-4o-prod", messages=[{"role": "user", "content": "hi"}]
        )
        assert gate.ledger.entries["az"].cost_usd == pytest.approx(_listed("gpt-4o-mini"))


async def test_an_answer_naming_no_known_model_leaves_the_backend_unpriced() -> None:
    async with gateway(_azure(Script(_answer("my-finetune-xyz")))) as gate:
        result = await gate.chat([{"role": "user", "content": "hi"}])
        assert result.cost_usd == 0.0 and gate.ledger.price("az") is None


async def test_a_self_hosted_server_is_never_priced_from_its_answers() -> None:
    self_hosted = gg.Backend(
        name="local", base_url="http://127.0.0.1:9/v1", model="llama",
        transport=httpx2.MockTransport(Script(_answer("gpt-4o"))),
    )
    async with gateway(self_hosted) as gate:
        assert (await gate.chat([{"role": "user", "content": "hi"}])).cost_usd == 0.0
