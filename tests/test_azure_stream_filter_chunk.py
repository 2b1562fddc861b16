"""An Azure stream opens with its content filter's verdict on the prompt: a chunk with
``"choices": []``, ``"id": ""`` and ``"model": ""`` (Azure's wire, as captured from the
service by other clients' test suites). Its empty id and model must not stand for the
answer's: the model is what prices an Azure deployment named after itself
(gptgate/price_by_answer.py), and the id is what a caller quotes to support.

Before: a ``gate.stream`` on ``deployment="gpt-4o-prod"`` with ``price=None`` took the empty
strings from that first chunk, so ``r.response_id`` was ``""``, the answer's model never
reached the price table and every stream cost $0 (the same answer non-streamed: $0.00189).
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg

pytest.importorskip("genai_prices")

SAFE = {name: {"filtered": False, "severity": "safe"}
        for name in ("hate", "self_harm", "sexual", "violence")}
PROMPT_FILTER = {"choices": [], "created": 0, "id": "", "model": "", "object": "",
                 "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": SAFE}]}
USAGE = {"completion_tokens": 3, "prompt_tokens": 1000, "total_tokens": 1003,
         "prompt_tokens_details": {"cached_tokens": 512}}


def _chunk(delta: dict[str, Any] | None, finish: str | None = None,
           usage: dict[str, Any] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "choices": [] if delta is None else [{"content_filter_results": SAFE, "delta": delta,
                                              "finish_reason": finish, "index": 0,
                                              "logprobs": None}],
        "created": 1750697159, "id": "chatcmpl-Blea", "model": "gpt-4o-2024-08-06",
        "object": "chat.completion.chunk", "system_fingerprint": "fp_ee1d74bde0",
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


STREAM = b"".join(
    f"data: {json.dumps(c)}\n\n".encode()
    for c in (PROMPT_FILTER, _chunk({"content": "", "refusal": None, "role": "assistant"}),
              _chunk({"content": "Hallo"}), _chunk({"content": " Welt"}), _chunk({}, "stop"),
              _chunk(None, usage=USAGE))
) + b"data: [DONE]\n\n"


def _azure() -> gg.Backend:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               content=STREAM)

    return gg.Backend(name="az", provider="azure", base_url="http://127.0.0.1:9",
                      deployment="gpt-4o-prod", api_key="k",
                      transport=httpx2.MockTransport(answer))


async def test_the_prompt_filter_chunk_names_neither_the_answer_nor_its_model() -> None:
    async with gg.Gateway([_azure()]) as gate:
        async with gate.stream([{"role": "user", "content": "Translate: Hello world"}]) as s:
            parts = [t async for t in s]
        r = s.result
        price = gate.ledger.price("az")
    assert "".join(parts) == r.text == "Hallo Welt" and r.finish_reason == "stop"
    assert r.response_id == "chatcmpl-Blea"
    assert r.raw is not None and r.raw["model"] == "gpt-4o-2024-08-06"
    assert price is not None  # priced as gpt-4o, the model the answer names
    assert r.cost_usd == pytest.approx(price.cost(r.usage)) and r.cost_usd > 0
