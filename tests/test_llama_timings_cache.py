"""A llama-server whose ``usage`` has no cache count reports its prompt-cache reuse in
``timings`` — and gptgate read none of it.

Wire shapes, from the servers' source:

* llama.cpp ``tools/server/server-task.cpp``: ``result_timings::to_json`` writes ``cache_n``
  (tokens reused from the slot's KV cache) and ``prompt_n`` (prompt tokens evaluated) into a
  ``timings`` object beside ``usage`` on a non-streamed answer and on a stream's last chunk;
  ``usage_json_oaicompat`` adds ``prompt_tokens_details.cached_tokens`` only in the builds that
  have it — earlier builds' chat ``usage`` is ``completion_tokens``, ``prompt_tokens``,
  ``total_tokens``.
* ik_llama.cpp ``examples/server/server-task.cpp`` (its PR 695 added ``usage``): ``usage``
  of those three counts and ``timings`` with ``prompt_n`` but no ``cache_n``.

Before: ``r.usage.cached_input_tokens`` was 0 on every answer from such a server, whatever
it reused; ``stats()`` read a 0% hit rate and the cache gate never widened a prefix's window.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.wire.slot_timings import answer_usage

MESSAGES = [{"role": "user", "content": "hi"}]

#: the older llama-server's three-count usage; its timings: 1,800 of 2,000 prompt tokens
#: reused, 200 evaluated
OLD_USAGE = {"completion_tokens": 12, "prompt_tokens": 2000, "total_tokens": 2012}
OLD_TIMINGS = {"cache_n": 1800, "prompt_n": 200, "prompt_ms": 90.1, "predicted_n": 12,
               "predicted_ms": 240.3}
#: ik_llama.cpp's timings: no cache_n, prompt_n the evaluated part, n_past/n_ctx beside
IK_TIMINGS = {"prompt_n": 500, "prompt_ms": 40.0, "predicted_n": 12, "predicted_ms": 200.0,
              "n_ctx": 8192, "n_past": 2012}


def _answer(usage: dict[str, Any], timings: dict[str, Any]) -> dict[str, Any]:
    return {
        "choices": [{"finish_reason": "stop", "index": 0,
                     "message": {"role": "assistant", "content": "hello"}}],
        "created": 1, "model": "qwen", "object": "chat.completion", "id": "chatcmpl-x",
        "usage": usage, "timings": timings,
    }


def _stream(usage: dict[str, Any], timings: dict[str, Any]) -> bytes:
    head = {"created": 1, "id": "chatcmpl-x", "model": "qwen",
            "object": "chat.completion.chunk"}
    chunks = [
        {**head, "choices": [{"finish_reason": None, "index": 0,
                              "delta": {"role": "assistant", "content": "hello"}}]},
        {**head, "choices": [{"finish_reason": "stop", "index": 0, "delta": {}}],
         "usage": usage, "timings": timings},
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _backend(usage: dict[str, Any], timings: dict[str, Any]) -> gg.Backend:
    def answer(request: httpx2.Request) -> httpx2.Response:
        if json.loads(request.content).get("stream"):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=_stream(usage, timings))
        return httpx2.Response(200, json=_answer(usage, timings))

    return gg.Backend(name="llama", provider="llamacpp", model="qwen", signals=False,
                      base_url="http://127.0.0.1:9/v1", transport=httpx2.MockTransport(answer))


@pytest.mark.parametrize(("timings", "cached"), [(OLD_TIMINGS, 1800), (IK_TIMINGS, 1500)])
async def test_a_chat_reads_the_reuse_from_timings(timings: dict[str, Any], cached: int) -> None:
    async with gg.Gateway([_backend(OLD_USAGE, timings)]) as gate:
        r = await gate.chat(MESSAGES)
        stats = gate.stats()["llama"]
    assert (r.usage.input_tokens, r.usage.cached_input_tokens) == (2000, cached)
    assert stats.cached_input_tokens == cached


async def test_a_stream_reads_the_reuse_from_its_last_chunk() -> None:
    async with gg.Gateway([_backend(OLD_USAGE, OLD_TIMINGS)]) as gate, gate.stream(MESSAGES) as s:
        text = "".join([piece async for piece in s])
    assert text == "hello"
    assert (s.result.usage.input_tokens, s.result.usage.cached_input_tokens) == (2000, 1800)
    assert not s.result.usage.estimated


async def test_an_sdk_call_through_the_gate_reads_it_too() -> None:
    async with gg.Gateway([_backend(OLD_USAGE, OLD_TIMINGS)]) as gate:
        client = openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1",
                                    http_client=gate.http_client("llama"), max_retries=0)
        answer = await client.chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
        stats = gate.stats()["llama"]
    assert answer.choices[0].message.content == "hello"
    assert stats.cached_input_tokens == 1800


def test_the_usage_own_count_wins() -> None:
    """A newer build says it in both places; a usage's own count (even 0) is the server's."""
    said = {**OLD_USAGE, "prompt_tokens_details": {"cached_tokens": 0}}
    usage = answer_usage({"usage": said, "timings": OLD_TIMINGS})
    assert usage is not None and usage.cached_input_tokens == 0
    deepseek = {**OLD_USAGE, "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 1936}
    usage = answer_usage({"usage": deepseek, "timings": OLD_TIMINGS})
    assert usage is not None and usage.cached_input_tokens == 64


@pytest.mark.parametrize("timings", [
    {"prompt_n": 2500},                 # more evaluated than the prompt: nonsense, unread
    {"cache_n": "1800"},                # not a count, and no prompt_n
    {"cache_n": 9000},                  # clamped to the prompt
    "garbage",
])
def test_timings_that_do_not_add_up_are_clamped_or_ignored(timings: Any) -> None:
    usage = answer_usage({"usage": OLD_USAGE, "timings": timings})
    assert usage is not None
    assert usage.cached_input_tokens == (2000 if timings == {"cache_n": 9000} else 0)


def test_no_usage_is_still_no_usage() -> None:
    assert answer_usage({"timings": OLD_TIMINGS}) is None
