"""A gptgate option given to a call (``gate.map(items, concurrency="auto")``) is refused.

Every unknown keyword of ``chat``/``stream``/``map`` is an OpenAI parameter sent in the body.
A Backend or Gateway option there was sent too: llama-server (and vLLM, and most
OpenAI-compatible servers) ignore unknown body keys without a word, so the caller believed the
job ran at ``concurrency="auto"`` or ``max_concurrency=8`` while nothing changed — found
writing ``gate.map(..., concurrency="auto")`` against a real llama-server. Now it is a
``BadRequestError`` naming where the option belongs, before anything is sent; ``extra_body=``
still sends such a key on purpose.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest

import gptgate as gg

ANSWER = {
    "id": "c", "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
MESSAGES = [{"role": "user", "content": "x"}]


def _gate(sent: list[dict[str, Any]]) -> gg.Gateway:
    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json=ANSWER)

    return gg.Gateway([gg.Backend(
        name="llama", provider="llamacpp", base_url="http://127.0.0.1:9/v1", model="m",
        transport=httpx2.MockTransport(handler),
    )])


@pytest.mark.parametrize(
    ("option", "value", "where"),
    [("concurrency", "auto", "Backend"), ("max_concurrency", 8, "Backend"),
     ("signals", True, "Backend"), ("deadline_s", 3.0, "Gateway")],
)
def test_a_gptgate_option_given_to_a_call_is_refused_before_sending(
    option: str, value: object, where: str
) -> None:
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        async with _gate(sent) as gate:
            with pytest.raises(gg.BadRequestError) as caught:
                await gate.chat(MESSAGES, **{option: value})
            assert f"{where}({option}=" in caught.value.message
            assert "extra_body" in caught.value.message
            with pytest.raises(gg.BadRequestError):
                async with gate.stream(MESSAGES, **{option: value}) as s:
                    async for _ in s:
                        pass
            # map's common keywords are every item's: each item fails, none is sent
            results = await gate.map([{"messages": MESSAGES}] * 2, **{option: value})
            assert all(isinstance(r, gg.BadRequestError) for r in results)

    anyio.run(main)
    assert sent == []


def test_openai_parameters_sharing_a_name_still_pass_and_extra_body_sends_anything() -> None:
    """``model``-like names that are also OpenAI (or OpenRouter) body keys are not refused."""
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        async with _gate(sent) as gate:
            await gate.chat(MESSAGES, seed=7, user="u", max_tokens=4)
            await gate.chat(MESSAGES, extra_body={"concurrency": 2})

    anyio.run(main)
    assert sent[0]["seed"] == 7 and sent[0]["user"] == "u"
    assert sent[1]["concurrency"] == 2
