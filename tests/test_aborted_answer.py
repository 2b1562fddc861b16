"""vLLM and SGLang end an answer their server cut off with ``finish_reason: "abort"`` (vLLM
``"error"`` too: its ``FinishReason.ERROR``, tested beside it):
vLLM's ``FinishReason.ABORT`` (``FINISH_REASON_STRINGS[2]``: ``pause_generation(mode=
"abort")``, a request aborted on preemption or shutdown), SGLang's ``FINISH_ABORT`` whose
``to_json()["type"]`` is ``"abort"`` (a graceful abort has no status code and is sent as an
ordinary last chunk). The bodies below are shaped as vLLM sends them.

Before: gptgate returned such an answer as a successful ``ChatResult`` with
``finish_reason="abort"`` (a stream as finished): the caller got a truncated answer as if it
were whole, never retried. Now it is the attempt's failure: a retryable ``BackendError``
for ``gate.chat`` (retried like a 5xx, counted against the backend's circuit, its usage
booked as billed), a ``StreamInterruptedError`` for a stream that had shown text.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import httpx2
import pytest

import gptgate as gg

PRICE = gg.Price(input_per_mtok=1.0, output_per_mtok=2.0)
ABORT_USAGE = {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
WHOLE_USAGE = {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129}


def _answer(text: str, finish: str, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc", "object": "chat.completion", "created": 1750000000,
        "model": "Qwen/Qwen3-8B",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                             "reasoning_content": None, "tool_calls": []},
                     "logprobs": None, "finish_reason": finish, "stop_reason": None}],
        "usage": usage, "prompt_logprobs": None,
    }


def _chunk(delta: dict[str, Any] | None, finish: str | None = None,
           usage: dict[str, int] | None = None) -> bytes:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1750000000,
        "model": "Qwen/Qwen3-8B",
        "choices": [] if delta is None else [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _stream(texts: list[str], finish: str, usage: dict[str, int]) -> bytes:
    parts = [_chunk({"role": "assistant", "content": ""})]
    parts += [_chunk({"content": t}) for t in texts]
    parts += [_chunk({"content": ""}, finish), _chunk(None, usage=usage), b"data: [DONE]\n\n"]
    return b"".join(parts)


def _vllm(hits: Counter[str], bodies: list[httpx2.Response]) -> gg.Backend:
    def answer(request: httpx2.Request) -> httpx2.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx2.Response(404)  # the load report (/metrics): none here
        hits["sent"] += 1
        return bodies.pop(0) if len(bodies) > 1 else bodies[0]

    return gg.Backend(name="vllm", provider="vllm", base_url="http://127.0.0.1:9",
                      model="Qwen/Qwen3-8B", price=PRICE,
                      transport=httpx2.MockTransport(answer))


def _json(body: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(200, json=body)


def _sse(body: bytes) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)


PROMPT = [{"role": "user", "content": "Write a long story."}]
FAST = {"backoff_base_s": 0.001, "backoff_cap_s": 0.002}


#: vLLM's FinishReason.ABORT and FinishReason.ERROR (a retryable internal error of the
#: request, a KV-cache load failure; OpenRouter's provider failure under a 200 too)
CUT = pytest.mark.parametrize("finish", ["abort", "error"])


@CUT
async def test_an_aborted_answer_is_retried_and_its_attempt_booked(finish: str) -> None:
    hits: Counter[str] = Counter()
    bodies = [_json(_answer("Once upon a", finish, ABORT_USAGE)),
              _json(_answer("Once upon a time, the end.", "stop", WHOLE_USAGE))]
    async with gg.Gateway([_vllm(hits, bodies)], max_attempts=3, **FAST) as gate:
        r = await gate.chat(PROMPT)
        entry = gate.ledger.entries["vllm"]
        stats = gate.stats()["vllm"]
    assert hits["sent"] == 2 and r.attempts == 2
    assert r.text == "Once upon a time, the end." and r.finish_reason == "stop"
    # both attempts billed: the aborted one at the server's own count
    assert entry.input_tokens == 240 and entry.output_tokens == 16
    assert r.billed_usage.input_tokens == 240 and r.billed_usage.output_tokens == 16
    assert stats.failures == 1


async def test_answers_aborted_every_time_raise_a_backend_error_and_open_the_circuit() -> None:
    hits: Counter[str] = Counter()
    bodies = [_json(_answer("Once upon a", "abort", ABORT_USAGE))]
    async with gg.Gateway([_vllm(hits, bodies)], max_attempts=2, breaker_threshold=4,
                          retry_budget_ratio=None, **FAST) as gate:
        for _ in range(2):
            with pytest.raises(gg.BackendError) as caught:
                await gate.chat(PROMPT)
            assert caught.value.retryable and caught.value.billed
            assert "abort" in str(caught.value)
        entry = gate.ledger.entries["vllm"]
        stats = gate.stats()["vllm"]
    assert hits["sent"] == 4
    assert entry.input_tokens == 4 * 120 and entry.output_tokens == 4 * 7
    assert stats.circuit == "open"


@CUT
async def test_a_stream_aborted_after_text_is_interrupted_with_its_usage_booked(
    finish: str,
) -> None:
    hits: Counter[str] = Counter()
    bodies = [_sse(_stream(["Once", " upon", " a"], finish, ABORT_USAGE))]
    seen: list[str] = []
    async with gg.Gateway([_vllm(hits, bodies)], max_attempts=3, **FAST) as gate:
        with pytest.raises(gg.StreamInterruptedError) as caught:
            async with gate.stream(PROMPT) as s:
                async for delta in s:
                    seen.append(delta)
        entry = gate.ledger.entries["vllm"]
        stats = gate.stats()["vllm"]
    assert "".join(seen) == caught.value.partial_text == "Once upon a"
    assert f'finish_reason "{finish}"' in str(caught.value)
    assert hits["sent"] == 1
    assert entry.input_tokens == 120 and entry.output_tokens == 7
    assert stats.failures == 1


async def test_a_stream_aborted_before_any_text_is_retried_unseen() -> None:
    hits: Counter[str] = Counter()
    bodies = [_sse(_stream([], "abort", {"prompt_tokens": 120, "completion_tokens": 0,
                                         "total_tokens": 120})),
              _sse(_stream(["Once", " upon", " a time."], "stop", WHOLE_USAGE))]
    async with gg.Gateway([_vllm(hits, bodies)], max_attempts=3, **FAST) as gate:
        async with gate.stream(PROMPT) as s:
            text = "".join([d async for d in s])
        r = s.result
        entry = gate.ledger.entries["vllm"]
    assert hits["sent"] == 2 and r.attempts == 2
    assert text == r.text == "Once upon a time." and r.finish_reason == "stop"
    assert entry.input_tokens == 240


def test_the_rule_reads_only_abort_and_error() -> None:
    """vLLM's ``FINISH_REASON_STRINGS``: "stop", "length", "abort", "error", "repetition";
    only the two the server failed by count (a repetition is the model's own answer)."""
    from gptgate.wire.aborted import is_aborted

    assert is_aborted("abort") and is_aborted("error")
    assert not any(is_aborted(r) for r in ("stop", "length", "tool_calls", None, "repetition"))


async def test_answers_ended_by_a_server_error_every_time_raise_a_backend_error() -> None:
    hits: Counter[str] = Counter()
    bodies = [_json(_answer("Once upon a", "error", ABORT_USAGE))]
    async with gg.Gateway([_vllm(hits, bodies)], max_attempts=2, **FAST) as gate:
        with pytest.raises(gg.BackendError) as caught:
            await gate.chat(PROMPT)
    assert caught.value.retryable and caught.value.billed
    assert 'finish_reason "error"' in str(caught.value)
    assert hits["sent"] == 2


async def test_an_aborted_answer_without_usage_is_booked_at_its_estimate() -> None:
    hits: Counter[str] = Counter()
    body = _answer("Once upon a time " * 20, "abort", ABORT_USAGE)
    del body["usage"]
    async with gg.Gateway([_vllm(hits, [_json(body)])], max_attempts=1, **FAST) as gate:
        with pytest.raises(gg.BackendError) as caught:
            await gate.chat(PROMPT)
        entry = gate.ledger.entries["vllm"]
    assert caught.value.billed and caught.value.usage_so_far is None
    assert caught.value.output_tokens > 20 and entry.output_tokens == caught.value.output_tokens
    assert entry.input_tokens > 0


def test_an_aborted_answer_read_on_in_the_background_sets_the_ledger_right() -> None:
    """``abandoned_answers="finish"``: an attempt timed out at 1 s is booked as an estimate
    and its answer read on; the answer that comes is aborted, and its own usage (not the
    estimate) is what the ledger keeps."""
    import anyio

    from gptgate.testing import LoopClock, run_virtual
    from tests.mockbackend import USER, gateway

    async def late(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(3.0)
        return _json(_answer("Once upon a", "abort", ABORT_USAGE))

    async def main() -> None:
        clock = LoopClock()
        backend = gg.Backend(
            name="mock", base_url="http://127.0.0.1:9/v1", model="m", concurrency=1,
            timeout=10.0, abandoned_answers="finish", transport=httpx2.MockTransport(late),
            price=PRICE,
        )
        async with gateway(backend, clock=clock) as gate:
            with pytest.raises(gg.RequestTimeout):
                await gate.chat(USER, timeout=1.0)
            await clock.sleep(2.5)
            entry = gate.ledger.entries["mock"]
            assert (entry.input_tokens, entry.output_tokens, entry.estimated_attempts) == (
                120, 7, 0)

    run_virtual(main)
