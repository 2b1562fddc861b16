"""A Messages-API backend on httpx2's MockTransport that records each request body, and the
dearer OpenAI-compatible backend beside it: for tests of what gptgate sends to Claude and
where a mixed fleet's router puts a call Claude refuses."""

from __future__ import annotations

import json
from typing import Any

import httpx2

import gptgate as gg

from .mockbackend import Script

SONNET = gg.Price(input_per_mtok=3.0, output_per_mtok=15.0)


def claude(
    sent: list[dict[str, Any]],
    model: str = "claude-sonnet-4-5",
    *,
    usage: dict[str, Any] | None = None,
    stop_reason: str = "end_turn",
    **options: Any,
) -> gg.Backend:
    """Backend ``claude`` answering every request with one text block, ``sent`` its bodies."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json={
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "7"}], "stop_reason": stop_reason,
            "stop_sequence": None, "usage": usage or {"input_tokens": 12, "output_tokens": 1},
        })

    settings: dict[str, Any] = {"api_key": "sk-ant-test", "price": SONNET}
    settings.update(options)
    return gg.Backend(name="claude", provider="anthropic", model=model,
                      transport=httpx2.MockTransport(answer), **settings)


def dearer_local(script: Script) -> gg.Backend:
    """Backend ``local``, a vLLM server priced above Claude: the router prefers Claude."""
    return gg.Backend(name="local", provider="vllm", model="Qwen/Qwen3-8B", signals=False,
                      price=gg.Price(input_per_mtok=50.0, output_per_mtok=50.0),
                      transport=httpx2.MockTransport(script))
