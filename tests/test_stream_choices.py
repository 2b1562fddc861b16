"""What an OpenAI-compatible stream carries besides choice 0's text is kept in the result:
the other choices of ``n > 1``, ``logprobs`` and a structured-output ``refusal``. A streamed
answer's ``raw`` is shaped like the non-streamed one, so code written against one works on the
other; the non-streamed answer already kept all of it (the server's JSON is ``raw``).

And an answer whose server sends no usage (a stream without a usage chunk, a proxy that drops
it) is booked at *all* it generated — every choice, tool-call arguments, a refusal — not only
choice 0's text: a streamed tool call was booked 0 output tokens."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg

M = [{"role": "user", "content": "hi"}]


def _chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": choices, **extra}


def _choice(index: int, delta: dict[str, Any], finish: str | None = None,
            logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}


def _lp(token: str) -> dict[str, Any]:
    entry = {"token": token, "logprob": -0.25, "bytes": list(token.encode())}
    return {"content": [{**entry, "top_logprobs": [entry]}], "refusal": None}


def _sse(chunks: list[dict[str, Any]]) -> httpx2.Response:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx2.Response(200, content=body.encode(),
                           headers={"content-type": "text/event-stream"})


async def _run(answer: httpx2.Response, *, stream: bool, **params: Any) -> gg.ChatResult:
    backend = gg.Backend(name="b", provider="openai", model="m",
                         base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                         transport=httpx2.MockTransport(lambda request: answer))
    async with gg.Gateway([backend], max_attempts=1) as gate:
        if not stream:
            return await gate.chat(M, **params)
        async with gate.stream(M, **params) as s:
            [_ async for _ in s]
        return s.result


def _n2(usage: bool) -> httpx2.Response:
    chunks = [_chunk([_choice(i, {"role": "assistant", "content": ""}) for i in (0, 1)])]
    for word in ("alpha ", "beta"):
        chunks += [_chunk([_choice(i, {"content": f"{word}{i}"})]) for i in (0, 1)]
    chunks += [_chunk([_choice(1, {}, "length")]), _chunk([_choice(0, {}, "stop")])]
    if usage:
        chunks.append(_chunk([], usage={"prompt_tokens": 5, "completion_tokens": 8,
                                        "total_tokens": 13}))
    return _sse(chunks)


async def test_a_streamed_n2_answer_keeps_every_choice() -> None:
    result = await _run(_n2(usage=True), stream=True, n=2)
    assert result.text == "alpha 0beta0" and result.finish_reason == "stop"
    assert result.raw is not None
    choices = result.raw["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert choices[1]["message"] == {"role": "assistant", "content": "alpha 1beta1"}
    assert choices[1]["finish_reason"] == "length"
    assert result.usage.output_tokens == 8 and not result.usage.estimated


async def test_a_streamed_n2_answer_without_usage_is_booked_for_both_choices() -> None:
    result = await _run(_n2(usage=False), stream=True, n=2)
    # 2 x 12 characters: ~3 tokens each, not 3 for the whole answer
    assert result.usage.estimated and result.usage.output_tokens == 6


async def test_streamed_logprobs_are_kept_as_a_non_streamed_answer_has_them() -> None:
    chunks = [
        _chunk([_choice(0, {"role": "assistant", "content": ""})]),
        _chunk([_choice(0, {"content": "Hel"}, logprobs=_lp("Hel"))]),
        _chunk([_choice(0, {"content": "lo"}, logprobs=_lp("lo"))]),
        _chunk([_choice(0, {}, "stop")]),
        _chunk([], usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
    ]
    result = await _run(_sse(chunks), stream=True, logprobs=True, top_logprobs=1)
    assert result.raw is not None
    logprobs = result.raw["choices"][0]["logprobs"]
    assert [entry["token"] for entry in logprobs["content"]] == ["Hel", "lo"]
    assert logprobs["content"][1]["top_logprobs"][0]["logprob"] == -0.25


async def test_a_streamed_refusal_is_kept_and_booked() -> None:
    chunks = [
        _chunk([_choice(0, {"role": "assistant", "content": None, "refusal": ""})]),
        _chunk([_choice(0, {"refusal": "I'm sorry, I cannot"})]),
        _chunk([_choice(0, {"refusal": " help with that."})]),
        _chunk([_choice(0, {}, "stop")]),
    ]
    schema = {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                      "schema": {"type": "object"}}}
    result = await _run(_sse(chunks), stream=True, response_format=schema)
    assert result.raw is not None
    message = result.raw["choices"][0]["message"]
    assert message["refusal"] == "I'm sorry, I cannot help with that."
    assert result.text == ""
    assert result.usage.estimated and result.usage.output_tokens == 9  # 35 characters


def _tool_stream() -> httpx2.Response:
    def call(delta: dict[str, Any]) -> dict[str, Any]:
        return _chunk([_choice(0, {"tool_calls": [delta]})])

    return _sse([
        _chunk([_choice(0, {"role": "assistant", "content": None})]),
        call({"index": 0, "id": "call_a", "type": "function",
              "function": {"name": "get_weather", "arguments": ""}}),
        call({"index": 0, "function": {"arguments": '{"city": '}}),
        call({"index": 1, "id": "call_b", "type": "function",
              "function": {"name": "get_time", "arguments": ""}}),
        call({"index": 0, "function": {"arguments": '"Paris"}'}}),
        call({"index": 1, "function": {"arguments": '{"tz": "CET"}'}}),
        _chunk([_choice(0, {}, "tool_calls")]),
    ])


async def test_a_streamed_tool_call_without_usage_is_booked_at_its_arguments() -> None:
    result = await _run(_tool_stream(), stream=True, tools=[], tool_choice="auto")
    assert result.finish_reason == "tool_calls"
    assert result.raw is not None
    calls = result.raw["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"]) for c in calls] == [
        ("call_a", "get_weather"), ("call_b", "get_time")]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    # names and arguments: 11 + 17 + 8 + 13 = 49 characters, 13 tokens (not 0)
    assert result.usage.estimated and result.usage.output_tokens == 13


@pytest.mark.parametrize("what", ["tool_call", "n2"])
async def test_a_non_streamed_answer_without_usage_is_booked_at_all_it_generated(
    what: str,
) -> None:
    if what == "tool_call":
        call = {"id": "call_a", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        choices = [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [call]}}]
        expected = 7  # 28 characters
    else:
        choices = [{"index": i, "finish_reason": "stop", "message": {
            "role": "assistant", "content": f"alpha {i}beta{i}"}} for i in (0, 1)]
        expected = 6
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": choices}
    result = await _run(httpx2.Response(200, json=body), stream=False, n=2)
    assert result.usage.estimated and result.usage.output_tokens == expected


async def test_an_n2_stream_cut_before_its_second_choice_ends_is_not_whole() -> None:
    """Choice 0 finished, choice 1 still generating, then the connection ends (no [DONE]):
    the answer is not whole — before, the stream completed with choice 1 cut short and its
    ``finish_reason`` None, as if it had been answered."""
    chunks = [_chunk([_choice(i, {"role": "assistant", "content": f"part {i}"})])
              for i in (0, 1)]
    chunks.append(_chunk([_choice(0, {}, "stop")]))
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)  # cut: no end, no [DONE]
    answer = httpx2.Response(200, content=body.encode(),
                             headers={"content-type": "text/event-stream"})
    with pytest.raises(gg.StreamInterruptedError) as caught:
        await _run(answer, stream=True, n=2)
    assert caught.value.partial_text == "part 0"


async def test_tool_call_pieces_without_an_index_continue_the_call_they_belong_to() -> None:
    """Servers that leave ``index`` out of tool-call deltas: a piece with a new ``id`` starts
    a call (Gemini's OpenAI endpoint sends each call whole), a piece without one continues the
    last — before, every argument fragment became a call of its own, with no name."""
    def call(delta: dict[str, Any]) -> dict[str, Any]:
        return _chunk([_choice(0, {"tool_calls": [delta]})])

    answer = _sse([
        _chunk([_choice(0, {"role": "assistant", "content": None})]),
        call({"id": "call_a", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": '}}),
        call({"function": {"arguments": '"Paris"}'}}),
        call({"id": "call_b", "type": "function",
              "function": {"name": "get_time", "arguments": "{}"}}),
        _chunk([_choice(0, {}, "tool_calls")]),
    ])
    result = await _run(answer, stream=True, tools=[])
    assert result.raw is not None
    calls = result.raw["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "get_time", "{}")]
