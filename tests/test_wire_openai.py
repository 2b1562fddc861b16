"""Request bodies, non-streamed responses, usage and the stream accumulator."""

from __future__ import annotations

import json
import math
from types import MappingProxyType
from typing import Any

import pytest

from gptgate.errors import BackendError, BadRequestError, RateLimitedError
from gptgate.results import Usage
from gptgate.wire import (
    ParsedChat,
    StreamAccumulator,
    build_chat_body,
    parse_chat_response,
    parse_usage,
)

MESSAGES = [{"role": "user", "content": "Grüß dich 👋"}]


def body(**kwargs: Any) -> dict[str, Any]:
    params = kwargs.pop("params", {})
    raw = build_chat_body("backend-model", MESSAGES, params, **kwargs)
    assert isinstance(raw, bytes)
    decoded: dict[str, Any] = json.loads(raw)
    return decoded


# --------------------------------------------------------------------------------------------
# build_chat_body


def test_every_openai_parameter_passes_through_untouched() -> None:
    params = {
        "temperature": 0.2,
        "max_tokens": 300,
        "n": 2,
        "seed": 7,
        "user": "u-1",
        "metadata": {"team": "a"},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "auto",
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        "logit_bias": {"42": -100},
        "some_vendor_extension": {"nested": [1, None, True]},
    }
    assert body(params=params, stream=False) == {
        "model": "backend-model",
        "messages": MESSAGES,
        **params,
    }


def test_backend_model_wins_and_owned_keys_are_dropped() -> None:
    params = {"model": "caller-model", "messages": [{"role": "user", "content": "other"}]}
    decoded = body(params={**params, "stream": True}, stream=False)
    assert decoded == {"model": "backend-model", "messages": MESSAGES}


def test_streaming_adds_stream_and_include_usage() -> None:
    decoded = body(params={"max_tokens": 5}, stream=True)
    assert decoded["stream"] is True
    assert decoded["stream_options"] == {"include_usage": True}
    assert decoded["max_tokens"] == 5


def test_streaming_merges_the_callers_stream_options() -> None:
    options = {"include_obfuscation": False, "include_usage": False}
    decoded = body(params={"stream_options": options}, stream=True)
    assert decoded["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert options == {"include_obfuscation": False, "include_usage": False}  # not mutated


def test_non_streaming_has_no_stream_keys() -> None:
    decoded = body(params={"stream_options": {"include_usage": True}, "stream": True}, stream=False)
    assert "stream" not in decoded
    assert "stream_options" not in decoded


def test_prompt_cache_key_added_unless_the_caller_set_one() -> None:
    assert body(params={}, stream=False, prompt_cache_key="k1")["prompt_cache_key"] == "k1"
    mine = body(params={"prompt_cache_key": "mine"}, stream=False, prompt_cache_key="k1")
    assert mine["prompt_cache_key"] == "mine"
    assert "prompt_cache_key" not in body(params={}, stream=False)


def test_body_is_compact_utf8() -> None:
    raw = build_chat_body("m", MESSAGES, {"temperature": 1}, stream=False)
    assert (
        raw
        == (
            '{"model":"m","messages":[{"role":"user","content":"Grüß dich 👋"}],"temperature":1}'
        ).encode()
    )


def test_read_only_mappings_and_tuples_are_serialized() -> None:
    messages = (MappingProxyType({"role": "user", "content": "hi"}),)
    raw = build_chat_body("m", messages, MappingProxyType({"stop": ("a", "b")}), stream=False)
    assert json.loads(raw) == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stop": ["a", "b"],
    }


def test_a_lone_surrogate_is_a_bad_request_not_an_escape_for_the_server_to_choke_on() -> None:
    """Escaped as ``\\ud800`` it is JSON no strict parser accepts, and a lenient server fails
    in its tokenizer with a 5xx — retried, and counted against the backend's health."""
    for messages, params in [
        ([{"role": "user", "content": "a\ud800b"}], {}),
        ([{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}], {}),
        (MESSAGES, {"user": "x\udc80"}),
    ]:
        with pytest.raises(BadRequestError, match="surrogate"):
            build_chat_body("m", messages, params, stream=False)


def test_a_nul_character_passes_through_as_valid_json() -> None:
    raw = build_chat_body("m", [{"role": "user", "content": "a\x00b"}], {}, stream=False)
    assert b"\\u0000" in raw
    assert json.loads(raw)["messages"][0]["content"] == "a\x00b"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_float_is_a_bad_request_not_invalid_json(value: float) -> None:
    with pytest.raises(BadRequestError, match="not JSON-serializable"):
        build_chat_body("m", MESSAGES, {"temperature": value}, stream=False)


def test_nesting_too_deep_to_encode_is_a_bad_request_not_a_recursion_error() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(BadRequestError, match="not JSON-serializable"):
        build_chat_body("m", MESSAGES, {"metadata": deep}, stream=False)


def test_unserializable_params_are_a_bad_request() -> None:
    with pytest.raises(BadRequestError, match="not JSON-serializable"):
        build_chat_body("m", MESSAGES, {"temperature": object()}, stream=False)


# --------------------------------------------------------------------------------------------
# parse_usage


def test_usage_from_chat_completions() -> None:
    usage = parse_usage(
        {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920},
        }
    )
    assert usage == Usage(input_tokens=2006, cached_input_tokens=1920, output_tokens=300)


@pytest.mark.parametrize(
    "details", [None, {}, {"cached_tokens": None}, {"audio_tokens": 0}, "weird"]
)
def test_cached_tokens_absent_or_null_is_zero(details: Any) -> None:
    obj: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 2}
    if details is not None:
        obj["prompt_tokens_details"] = details
    assert parse_usage(obj) == Usage(input_tokens=10, cached_input_tokens=0, output_tokens=2)


def test_usage_from_responses_api_shape() -> None:
    usage = parse_usage(
        {"input_tokens": 50, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 32}}
    )
    assert usage == Usage(input_tokens=50, cached_input_tokens=32, output_tokens=7)


def test_cached_tokens_are_clamped_to_input() -> None:
    usage = parse_usage({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 64}})
    assert usage == Usage(input_tokens=10, cached_input_tokens=10, output_tokens=0)


@pytest.mark.parametrize("obj", [None, [], "usage", 3, {}, {"total_tokens": 5}])
def test_no_usage(obj: Any) -> None:
    assert parse_usage(obj) is None


def test_odd_token_values_are_tolerated() -> None:
    usage = parse_usage({"prompt_tokens": 10.0, "completion_tokens": -3})
    assert usage == Usage(input_tokens=10, output_tokens=0)


# --------------------------------------------------------------------------------------------
# parse_chat_response


def completion(content: Any = "Hello!", **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-x-2026",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        **extra,
    }


def parse(obj: Any, **kwargs: Any) -> ParsedChat:
    return parse_chat_response(json.dumps(obj).encode(), backend="b", **kwargs)


def test_parse_a_plain_completion() -> None:
    obj = completion(timings={"predicted_ms": 12.5})
    parsed = parse(obj)
    assert parsed == ParsedChat(
        text="Hello!",
        finish_reason="stop",
        usage=Usage(input_tokens=12, cached_input_tokens=0, output_tokens=3),
        response_id="chatcmpl-1",
        model="gpt-x-2026",
        raw=obj,
    )


def test_null_content_is_empty_text() -> None:
    obj = completion(None)
    obj["choices"][0]["finish_reason"] = "tool_calls"
    obj["choices"][0]["message"]["tool_calls"] = [{"id": "c1", "type": "function"}]
    parsed = parse(obj)
    assert parsed.text == ""
    assert parsed.finish_reason == "tool_calls"
    assert parsed.raw is not None
    assert parsed.raw["choices"][0]["message"]["tool_calls"][0]["id"] == "c1"


def test_list_content_joins_text_parts() -> None:
    parts = [
        {"type": "text", "text": "Hel"},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "lo"},
    ]
    assert parse(completion(parts)).text == "Hello"


def test_missing_usage_and_ids_are_none() -> None:
    parsed = parse({"choices": [{"message": {"content": "x"}}]})
    assert (parsed.usage, parsed.response_id, parsed.model, parsed.finish_reason) == (
        None,
        None,
        None,
        None,
    )


def test_invalid_utf8_in_a_response_is_replaced() -> None:
    raw = json.dumps(completion("XY")).encode().replace(b"XY", b"X\xff")
    assert parse_chat_response(raw, backend="b").text == "X\ufffd"


def test_error_body_under_200_is_raised() -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    with pytest.raises(BackendError, match="The server had an error") as info:
        parse(error, headers={"x-request-id": "req_9"})
    assert info.value.request_id == "req_9"
    assert info.value.backend == "b"
    assert info.value.status == 200


def test_rate_limit_error_body_under_200_is_rate_limited() -> None:
    error = {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}
    with pytest.raises(RateLimitedError, match="slow down") as info:
        parse(error, headers={"retry-after": "3"})
    assert info.value.retry_after == 3.0


def test_error_string_under_200() -> None:
    with pytest.raises(BackendError, match="model crashed"):
        parse({"error": "model crashed"})


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"[1, 2]", b'{"choices": []}', b'{"id": "x"}', b'{"choices": [1]}'],
)
def test_malformed_response_is_backend_error(raw: bytes) -> None:
    with pytest.raises(BackendError, match="malformed response") as info:
        parse_chat_response(raw, backend="b", headers={"x-request-id": "r"})
    assert info.value.retryable is True
    assert info.value.request_id == "r"


# --------------------------------------------------------------------------------------------
# StreamAccumulator


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "model": "llama",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
        **extra,
    }


LLAMA_CPP_SEQUENCE = [
    chunk({"role": "assistant", "content": None}),
    chunk({"content": "Hel"}, timings={"predicted_n": 1}),
    chunk({"content": ""}),
    chunk({}),
    chunk({"content": "lo"}),
    chunk({}, "stop", timings={"predicted_n": 2, "predicted_ms": 40.0}),
    {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "model": "llama",
        "choices": [],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 2,
            "total_tokens": 22,
            "prompt_tokens_details": {"cached_tokens": 16},
        },
        "timings": {"prompt_n": 4},
    },
]


def test_accumulator_on_the_llama_cpp_sequence() -> None:
    accumulator = StreamAccumulator()
    deltas = [accumulator.feed(c) for c in LLAMA_CPP_SEQUENCE]
    assert deltas == ["", "Hel", "", "", "lo", "", ""]
    assert accumulator.text == "Hello"
    assert accumulator.finish_reason == "stop"
    assert accumulator.usage == Usage(input_tokens=20, cached_input_tokens=16, output_tokens=2)
    assert accumulator.response_id == "chatcmpl-s"
    assert accumulator.model == "llama"
    assert accumulator.chunks == 7
    result = accumulator.result()
    assert (result.text, result.finish_reason, result.usage) == (
        "Hello",
        "stop",
        accumulator.usage,
    )


def test_has_content_is_the_commit_point() -> None:
    accumulator = StreamAccumulator()
    accumulator.feed(chunk({"role": "assistant", "content": None}))
    accumulator.feed(chunk({"content": ""}))
    assert accumulator.has_content is False
    accumulator.feed(chunk({"content": "x"}))
    assert accumulator.has_content is True


def test_text_is_readable_between_deltas() -> None:
    accumulator = StreamAccumulator()
    accumulator.feed(chunk({"content": "a"}))
    accumulator.feed(chunk({"content": "b"}))
    assert accumulator.text == "ab"
    accumulator.feed(chunk({"content": "c"}))
    assert accumulator.text == "abc"
    assert StreamAccumulator().text == ""


def test_other_choices_are_ignored() -> None:
    accumulator = StreamAccumulator()
    other = chunk({"content": "other"})
    other["choices"][0]["index"] = 1
    assert accumulator.feed(other) == ""
    assert accumulator.feed(chunk({"content": "mine"})) == "mine"
    assert accumulator.text == "mine"


def test_error_chunk_raises_the_mapped_error() -> None:
    accumulator = StreamAccumulator(backend="b", request_id="req_1")
    with pytest.raises(RateLimitedError) as info:
        accumulator.feed({"error": {"message": "Rate limit reached", "type": "rate_limit_error"}})
    assert info.value.backend == "b"
    assert info.value.request_id == "req_1"


def test_streamed_tool_calls_are_merged_into_raw() -> None:
    accumulator = StreamAccumulator()
    accumulator.feed(chunk({"role": "assistant", "content": None}))
    accumulator.feed(
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        )
    )
    accumulator.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}))
    accumulator.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}))
    accumulator.feed(chunk({}, "tool_calls"))
    result = accumulator.result()
    assert result.text == ""
    assert accumulator.has_content is False
    assert result.raw is not None
    assert result.raw["choices"][0]["message"]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
        }
    ]
    assert result.raw["choices"][0]["finish_reason"] == "tool_calls"
