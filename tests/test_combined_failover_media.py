"""SDK failover with images in the prompt estimate: an image request the primary cannot serve
is reserved again on the fallback it goes to — under the fallback's price, by the media rule
of its wire — so a dollar budget that admits the question refuses its image there too, before
anything is sent (gptgate/sdk_failover.py with gptgate/media_tokens.py). OpenAI primary
refusing connections, Azure fallback; virtual clock, mock transports.
"""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.test_media_budget import BUDGET, MAX_TOKENS, PRICE, TEXT_ONLY, WITH_IMAGE

ANSWER = {
    "id": "c", "object": "chat.completion", "created": 1, "model": "served",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "a cat"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}


def test_an_image_failed_over_to_azure_is_reserved_there_by_its_price() -> None:
    """``a`` is free and down; ``b`` (Azure) costs $2/M input. The question fails over and is
    answered by ``b``; its image would cost ~$0.0022 on ``b``, more than the $0.002 budget:
    refused (the SDK's 429 naming the budget), nothing sent to ``b``."""
    seen: list[str] = []

    def refused(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    def azure(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.path)
        return httpx2.Response(200, json=ANSWER)

    async def main() -> dict[str, Any]:
        clock = LoopClock()
        gate = gg.Gateway([
            gg.Backend(name="a", base_url="http://127.0.0.1:9/v1", model="m",
                       api_key="sk-a-primary-0123", price=gg.Price(input_per_mtok=0.0,
                                                                   output_per_mtok=0.0),
                       transport=httpx2.MockTransport(refused)),
            gg.Backend(name="b", provider="azure", base_url="http://127.0.0.1:9",
                       deployment="dep-b", api_key="az-key-second-0123", price=PRICE,
                       transport=httpx2.MockTransport(azure)),
        ], clock=clock, seed=1, budget=BUDGET)
        async with gate:
            client = openai.AsyncOpenAI(
                api_key="sk-a-primary-0123", base_url="http://127.0.0.1:9/v1", max_retries=0,
                http_client=gate.http_client("a", fallback=["b"]),
            )
            text = await client.chat.completions.create(
                model="m", messages=TEXT_ONLY, max_tokens=MAX_TOKENS  # type: ignore[arg-type]
            )
            sent = len(seen)
            with pytest.raises(openai.RateLimitError) as info:
                await client.chat.completions.create(
                    model="m", messages=WITH_IMAGE, max_tokens=MAX_TOKENS,  # type: ignore[arg-type]
                )
            return {"text": text.choices[0].message.content, "sent": sent,
                    "after": len(seen), "error": str(info.value),
                    "b_ok": gate.ledger.entries["b"].calls_ok}

    out = run_virtual(main)
    assert (out["text"], out["sent"], out["b_ok"]) == ("a cat", 1, 1)
    assert out["after"] == 1 and "budget" in out["error"]  # the image: nothing sent to b
    assert "base64" not in out["error"]
