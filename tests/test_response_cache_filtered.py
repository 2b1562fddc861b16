"""gg.ResponseCache does not store an answer a content filter stopped: OpenAI/Azure's
``finish_reason="content_filter"``, Anthropic's ``stop_reason="refusal"`` (which its dialect
maps to ``content_filter``). Filters change and a retry with other settings is the remedy, so
replaying a filtered answer to every identical request would make it permanent. A ``length``
answer is still stored: the same ``max_tokens`` cuts it the same way, and a larger one is
another key."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg

from .mockbackend import Script, completion

M = [{"role": "user", "content": "Tell me about the thing."}]


def _openai(finish: str, stream: bool) -> httpx2.Response:
    if not stream:
        body = completion("I can't help with that.")
        body["choices"][0]["finish_reason"] = finish
        return httpx2.Response(200, json=body)
    chunks = [
        {"id": "c", "model": "m", "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": "I can't"}}]},
        {"id": "c", "model": "m", "choices": [
            {"index": 0, "delta": {"content": " help."}, "finish_reason": finish}]},
        {"id": "c", "model": "m", "choices": [],
         "usage": {"prompt_tokens": 10, "completion_tokens": 3}},
    ]
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx2.Response(200, content=sse.encode(),
                           headers={"content-type": "text/event-stream"})


def _anthropic(stop: str) -> httpx2.Response:
    return httpx2.Response(200, json={
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "I can't help with that."}],
        "stop_reason": stop, "usage": {"input_tokens": 10, "output_tokens": 6},
    })


async def _twice(provider: str, finish: str, stream: bool) -> tuple[list[gg.ChatResult], int]:
    def answer(request: httpx2.Request) -> httpx2.Response:
        streamed = bool(json.loads(request.content).get("stream"))
        return _anthropic(finish) if provider == "anthropic" else _openai(finish, streamed)

    script = Script(answer)
    extra: dict[str, Any] = {"api_key": "sk-ant-test"} if provider == "anthropic" else {}
    backend = gg.Backend(
        name="b", provider=provider, model="m", base_url="http://127.0.0.1:9/v1",
        transport=httpx2.MockTransport(script), **extra,
    )
    cache = gg.ResponseCache(ttl_s=60, max_entries=10)
    results: list[gg.ChatResult] = []
    async with gg.Gateway([backend], response_cache=cache, max_attempts=1) as gate:
        for _ in range(2):
            if stream:
                async with gate.stream(M, temperature=0, max_tokens=50) as s:
                    [_ async for _ in s]
                results.append(s.result)
            else:
                results.append(await gate.chat(M, temperature=0, max_tokens=50))
    return results, len(script.requests)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_content_filtered_answer_is_not_stored(stream: bool) -> None:
    (first, again), sent = await _twice("openai", "content_filter", stream)
    assert first.finish_reason == again.finish_reason == "content_filter"
    assert not again.from_cache and sent == 2


async def test_an_anthropic_refusal_is_not_stored() -> None:
    (first, again), sent = await _twice("anthropic", "refusal", False)
    assert first.finish_reason == "content_filter"
    assert not again.from_cache and sent == 2


@pytest.mark.parametrize("finish", ["stop", "length"])
async def test_a_finished_or_length_cut_answer_is_still_stored(finish: str) -> None:
    (first, again), sent = await _twice("openai", finish, False)
    assert first.finish_reason == finish and again.from_cache and sent == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_an_answer_that_finished_in_an_error_is_not_stored(stream: bool) -> None:
    """OpenRouter normalises ``finish_reason`` to ``stop``, ``length``, ``tool_calls``,
    ``content_filter`` or ``error``: ``error`` is a generation the provider ended in an error
    under a 200 (its partial text). Stored, that error was served to every identical request
    for the TTL. It is now the attempt's failure (gptgate/wire/aborted.py), never a result:
    neither of two identical calls gets it, both reach the server."""
    script = Script(lambda request: _openai("error", stream))
    backend = gg.Backend(name="b", model="m", base_url="http://127.0.0.1:9/v1",
                         transport=httpx2.MockTransport(script))
    cache = gg.ResponseCache(ttl_s=60, max_entries=10)
    async with gg.Gateway([backend], response_cache=cache, max_attempts=1) as gate:
        for _ in range(2):
            with pytest.raises((gg.BackendError, gg.StreamInterruptedError)) as caught:
                if stream:
                    async with gate.stream(M, temperature=0, max_tokens=50) as s:
                        [_ async for _ in s]
                else:
                    await gate.chat(M, temperature=0, max_tokens=50)
            assert 'finish_reason "error"' in str(caught.value)
    assert len(script.requests) == 2
