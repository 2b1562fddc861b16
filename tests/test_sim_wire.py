"""The simulator speaks OpenAI's wire format (and llama-server's dialect) faithfully."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx2
from hypothesis import given
from hypothesis import strategies as st

from gptgate.sim import LoopClock, SimEngine, SimTransport, get_profile, run_virtual
from gptgate.sim.job import group_ends
from gptgate.sim.text import output_text
from gptgate.tokens import estimate_prompt_tokens, estimate_text_tokens

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three prime numbers."},
]


def _client(engine: SimEngine) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://sim/v1")


def _events(raw: str) -> list[str]:
    return [line[len("data: ") :] for line in raw.split("\n") if line.startswith("data: ")]


def test_non_streaming_response_is_an_openai_chat_completion() -> None:
    async def main() -> tuple[httpx2.Response, dict[str, Any]]:
        engine = SimEngine("hosted", clock=LoopClock(), seed=1)
        async with _client(engine) as client:
            r = await client.post(
                "/chat/completions", json={"model": "gpt-5.5", "messages": MESSAGES}
            )
        return r, r.json()

    r, body = run_virtual(main)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-request-id"].startswith("req_")
    assert int(r.headers["x-ratelimit-remaining-requests"]) < int(
        r.headers["x-ratelimit-limit-requests"]
    )
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int)
    choice = body["choices"][0]
    assert choice["index"] == 0
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["prompt_tokens"] == estimate_prompt_tokens(MESSAGES)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    text = choice["message"]["content"]
    assert abs(estimate_text_tokens(text) - usage["completion_tokens"]) <= 1


def test_streaming_response_with_include_usage() -> None:
    async def main() -> tuple[httpx2.Response, list[tuple[float, str]]]:
        engine = SimEngine("hosted", clock=LoopClock(), seed=2)
        async with _client(engine) as client:
            body = {
                "model": "gpt-5.5",
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            async with client.stream("POST", "/chat/completions", json=body) as r:
                arrivals = [(LoopClock().now(), chunk) async for chunk in r.aiter_text()]
        return r, arrivals

    r, arrivals = run_virtual(main)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _events("".join(chunk for _, chunk in arrivals))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert all(c["usage"] is None for c in chunks[:-1])
    finish = chunks[-2]["choices"][0]
    assert finish["finish_reason"] == "stop" and finish["delta"] == {}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    usage = usage_chunk["usage"]
    assert abs(estimate_text_tokens(text) - usage["completion_tokens"]) <= 1
    # several tokens per SSE write, and the writes are spread over time (not buffered)
    assert len(arrivals) <= get_profile("hosted").stream_chunks
    assert arrivals[-1][0] - arrivals[0][0] > 0.1


def test_streaming_without_include_usage_sends_no_usage() -> None:
    async def main() -> str:
        engine = SimEngine("gpu", clock=LoopClock())
        async with _client(engine) as client:
            body = {"messages": MESSAGES, "stream": True}
            async with client.stream("POST", "/chat/completions", json=body) as r:
                return (await r.aread()).decode()

    events = _events(run_virtual(main))
    assert events[-1] == "[DONE]"
    assert all("usage" not in json.loads(e) for e in events[:-1])


def test_llamacpp_quirks() -> None:
    async def main() -> tuple[httpx2.Response, str, httpx2.Response, httpx2.Response]:
        engine = SimEngine("llamacpp", clock=LoopClock())
        async with _client(engine) as client:
            body = {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
            async with client.stream("POST", "/chat/completions", json=body) as s:
                raw = (await s.aread()).decode()
            plain = await client.post("/chat/completions", json={"messages": MESSAGES})
            broken = await client.post(
                "/chat/completions",
                content=b"{not json",
                headers={"content-type": "application/json"},
            )
        return s, raw, plain, broken

    s, raw, plain, broken = run_virtual(main)
    assert not any(k.startswith("x-ratelimit") for k in s.headers)
    chunks = [json.loads(e) for e in _events(raw)[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert chunks[-1]["choices"] == [] and "timings" in chunks[-1]
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert "timings" in chunks[-2]
    assert plain.status_code == 200 and plain.json()["timings"]["predicted_n"] > 0
    assert broken.status_code == 500  # llama.cpp answers malformed JSON with a 500
    assert broken.json()["error"]["code"] == 500


def test_request_validation_errors_are_openai_shaped() -> None:
    big = [{"role": "user", "content": "x" * 4 * 40_000}]

    async def main() -> list[httpx2.Response]:
        engine = SimEngine(
            get_profile("gpu").model_copy(update={"context_tokens": 8192}), clock=LoopClock()
        )
        async with _client(engine) as client:
            return [
                await client.post("/chat/completions", json={"model": "m"}),
                await client.post("/chat/completions", json={"messages": []}),
                await client.post("/chat/completions", content=b"{oops"),
                await client.post(
                    "/chat/completions", json={"messages": MESSAGES, "max_tokens": 0}
                ),
                await client.post("/chat/completions", json={"messages": big}),
                await client.post("/chat/completions", json={"messages": ["hi"]}),
            ]

    missing, empty, malformed, zero, too_long, not_object = run_virtual(main)
    for r in (missing, empty, malformed, zero, too_long, not_object):
        assert r.status_code == 400
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["type"] == "invalid_request_error"
    assert missing.json()["error"]["param"] == "messages"
    assert zero.json()["error"]["param"] == "max_tokens"
    assert too_long.json()["error"]["code"] == "context_length_exceeded"


def test_llamacpp_context_overflow_error() -> None:
    async def main() -> httpx2.Response:
        engine = SimEngine("llamacpp", clock=LoopClock())
        big = [{"role": "user", "content": "y" * 4 * 40_000}]
        async with _client(engine) as client:
            return await client.post("/chat/completions", json={"messages": big})

    r = run_virtual(main)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "exceed_context_size_error"


def test_paths_models_and_404() -> None:
    async def main() -> list[httpx2.Response]:
        engine = SimEngine("cpu", clock=LoopClock())
        async with httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://sim") as c:
            return [
                await c.get("/v1/models"),
                await c.post("/chat/completions", json={"messages": MESSAGES}),
                await c.post("/v1/audio/speech", json={"input": "x"}),  # served: /v1/embeddings
            ]

    models, unprefixed, missing = run_virtual(main)
    assert models.json()["object"] == "list"
    assert models.json()["data"][0]["id"] == get_profile("cpu").model
    assert unprefixed.status_code == 200
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "invalid_request_error"


def test_max_tokens_caps_output_with_finish_reason_length() -> None:
    async def main() -> dict[str, Any]:
        engine = SimEngine("gpu", clock=LoopClock())
        async with _client(engine) as client:
            body = {"messages": MESSAGES, "max_completion_tokens": 3}
            return (await client.post("/chat/completions", json=body)).json()

    body = run_virtual(main)
    assert body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["finish_reason"] == "length"
    assert estimate_text_tokens(body["choices"][0]["message"]["content"]) == 3


def test_content_is_deterministic_in_seed_and_request() -> None:
    async def text(seed: int, question: str) -> str:
        engine = SimEngine("gpu", clock=LoopClock(), seed=seed)
        async with _client(engine) as client:
            msgs = [{"role": "user", "content": question}]
            r = await client.post("/chat/completions", json={"messages": msgs})
            return str(r.json()["choices"][0]["message"]["content"])

    async def main() -> list[str]:
        return [await text(7, "a"), await text(7, "a"), await text(8, "a"), await text(7, "b")]

    a, again, other_seed, other_request = run_virtual(main)
    assert a == again
    assert a != other_seed
    assert a != other_request


@given(tokens=st.integers(1, 5000), chunks=st.integers(1, 64))
def test_stream_groups_cover_every_token_in_at_most_the_configured_writes(
    tokens: int, chunks: int
) -> None:
    ends = group_ends(tokens, chunks)
    assert ends[-1] == tokens
    assert len(ends) <= chunks
    assert all(a < b for a, b in itertools.pairwise(ends))
    if chunks > 1:
        assert ends[0] == 1  # the first token goes out alone: an honest time to first token


@given(key=st.integers(0, 2**64 - 1), tokens=st.integers(1, 40_000))
def test_pseudo_text_estimates_to_exactly_its_token_count(key: int, tokens: int) -> None:
    text = output_text(key, tokens)
    assert estimate_text_tokens(text) == tokens
    assert output_text(key, tokens) == text
