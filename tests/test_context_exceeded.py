"""A server's own "the prompt does not fit the context window" 400 is a RequestTooLargeError.

docs/errors.md promises ``RequestTooLargeError`` ("it can never fit") for a prompt too long
for the context window, but only gptgate's own check (``Backend(context_tokens=...)``) raised
it: the same verdict from the server — llama-server's ``exceed_context_size_error``, OpenAI's
``context_length_exceeded``, vLLM's "maximum context length" — came back as a plain
``BadRequestError`` without the counts. The bodies below are the servers' exact shapes (the
llama-server one captured from llama.cpp's server, the build in
/work/shared/realserver/start_server.sh, with a 12,011-token prompt and ``-c 8192 -np 4``).
"""

from __future__ import annotations

import json

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.errors import BadRequestError, RequestTooLargeError
from gptgate.wire import error_for_status

#: llama-server's answer, byte for byte (non-streamed and streamed requests alike)
LLAMA_BODY = (
    b'{"error":{"code":400,"message":"request (12011 tokens) exceeds the available context '
    b'size (2048 tokens), try increasing it","type":"exceed_context_size_error",'
    b'"n_prompt_tokens":12011,"n_ctx":2048}}'
)
OPENAI_BODY = json.dumps({"error": {
    "message": "This model's maximum context length is 128000 tokens. However, your messages "
               "resulted in 130512 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
}}).encode()
VLLM_BODY = json.dumps({
    "object": "error",
    "message": "This model's maximum context length is 2048 tokens. However, you requested "
               "3000 tokens (2900 in the messages, 100 in the completion). Please reduce the "
               "length of the messages or completion.",
    "type": "BadRequestError", "param": None, "code": 400,
}).encode()
ANTHROPIC_BODY = json.dumps({"type": "error", "error": {
    "type": "invalid_request_error",
    "message": "prompt is too long: 210412 tokens > 200000 maximum",
}}).encode()


@pytest.mark.parametrize(
    ("body", "limit", "requested"),
    [(LLAMA_BODY, 2048, 12011), (OPENAI_BODY, 128000, 130512), (VLLM_BODY, 2048, 3000),
     (ANTHROPIC_BODY, 200000, 210412)],
    ids=["llama-server", "openai", "vllm", "anthropic"],
)
def test_a_servers_context_overflow_is_request_too_large(
    body: bytes, limit: int, requested: int
) -> None:
    error = error_for_status(400, {"connection": "close"}, body, backend="b")
    assert isinstance(error, RequestTooLargeError)
    assert isinstance(error, BadRequestError)  # what callers already catch keeps working
    assert (error.limit, error.requested) == (limit, requested)
    assert error.retryable is False
    assert error.status == 400
    assert error.message.startswith("request too large")


def test_other_bad_requests_stay_plain() -> None:
    body = (
        b'{"error":{"code":400,"message":"\'messages\' is required",'
        b'"type":"invalid_request_error"}}'
    )
    error = error_for_status(400, {}, body, backend="b")
    assert type(error) is BadRequestError


def test_a_context_message_in_a_429_is_still_a_rate_limit() -> None:
    """Only a 4xx refusal of the request is read as one; a 429 keeps its own rules."""
    error = error_for_status(429, {}, VLLM_BODY, backend="b")
    assert isinstance(error, gg.RateLimitedError)


def _llama_server(sent: list[bytes]) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":  # the signals reads (on by default): not served here
            return httpx2.Response(404)
        sent.append(request.content)
        return httpx2.Response(
            400, content=LLAMA_BODY,
            headers={"content-type": "application/json; charset=utf-8", "connection": "close"},
        )

    return httpx2.MockTransport(handler)


@pytest.mark.parametrize("stream", [False, True])
def test_the_gateway_raises_it_once_without_retrying(stream: bool) -> None:
    sent: list[bytes] = []

    async def main() -> None:
        backend = gg.Backend(
            name="llama", provider="llamacpp", base_url="http://127.0.0.1:9/v1", model="m",
            transport=_llama_server(sent),
        )
        async with gg.Gateway([backend]) as gate:
            with pytest.raises(RequestTooLargeError) as caught:
                if stream:
                    async with gate.stream([{"role": "user", "content": "x"}]) as s:
                        async for _ in s:
                            pass
                else:
                    await gate.chat([{"role": "user", "content": "x"}], max_tokens=8)
            assert (caught.value.limit, caught.value.requested) == (2048, 12011)
            assert caught.value.backend == "llama"
            stats = gate.stats()["llama"]
            assert (stats.in_flight, stats.retries, stats.circuit) == (0, 0, "closed")

    anyio.run(main)
    assert len(sent) == 1


def _answering(sent: list[str], name: str) -> httpx2.MockTransport:
    usage = {"prompt_tokens": 12011, "completion_tokens": 1, "total_tokens": 12012}

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":  # the signals reads (on by default): not served here
            return httpx2.Response(404)
        sent.append(name)
        if json.loads(request.content).get("stream"):
            chunks = [
                {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {"choices": [], "usage": usage},
            ]
            body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx2.Response(200, content=body.encode(),
                                   headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json={
            "id": "c", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                         "finish_reason": "stop"}],
            "usage": usage,
        })

    return httpx2.MockTransport(handler)


def _refusing(sent: list[str], name: str) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":  # the signals reads (on by default): not served here
            return httpx2.Response(404)
        sent.append(name)
        return httpx2.Response(400, content=LLAMA_BODY,
                               headers={"content-type": "application/json"})

    return httpx2.MockTransport(handler)


def _two(small: httpx2.MockTransport, large: httpx2.MockTransport, tiers: bool) -> gg.Gateway:
    def backend(name: str, transport: httpx2.MockTransport) -> gg.Backend:
        tier = {"tier": name} if tiers else {}
        return gg.Backend(name=name, provider="llamacpp", base_url="http://127.0.0.1:9/v1",
                          model="m", transport=transport, **tier)

    return gg.Gateway([backend("small", small), backend("large", large)])


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_too_long_for_the_small_tier_goes_to_the_large(stream: bool) -> None:
    """Measured on two real llama-servers (contexts of 512 and 2,048 tokens, tiers small and
    large): a 1,211-token call with ``tier="auto"`` failed on the small one while the large
    one could take it."""
    sent: list[str] = []

    async def main() -> None:
        gate = _two(_refusing(sent, "small"), _answering(sent, "large"), tiers=True)
        async with gate:
            if stream:
                async with gate.stream([{"role": "user", "content": "y"}], max_tokens=8) as s:
                    async for _ in s:
                        pass
                assert s.result.backend == "large"
            else:
                result = await gate.chat([{"role": "user", "content": "x"}], max_tokens=8)
                assert result.backend == "large"
            small = gate.stats()["small"]
            assert (small.circuit, small.in_flight) == ("closed", 0)

    anyio.run(main)
    assert sent == ["small", "large"]


def test_a_job_over_two_backends_loses_no_call_to_the_smaller_window() -> None:
    """The same measurement without tiers: 4 of 6 such calls failed on the small server."""
    sent: list[str] = []

    async def main() -> None:
        async with _two(_refusing(sent, "small"), _answering(sent, "large"), False) as gate:
            results = await gate.map([{"messages": [{"role": "user", "content": f"{i}"}]}
                                      for i in range(6)])
            assert [r.backend for r in results if isinstance(r, gg.ChatResult)] == ["large"] * 6

    anyio.run(main)
    assert sent.count("large") == 6 and "small" in sent


def test_it_is_raised_once_every_backend_refused_it() -> None:
    sent: list[str] = []

    async def main() -> None:
        async with _two(_refusing(sent, "small"), _refusing(sent, "large"), False) as gate:
            with pytest.raises(RequestTooLargeError):
                await gate.chat([{"role": "user", "content": "x"}])

    anyio.run(main)
    assert sorted(sent) == ["large", "small"]  # each asked once, not five attempts


def test_a_pinned_backend_is_not_left() -> None:
    sent: list[str] = []

    async def main() -> None:
        async with _two(_refusing(sent, "small"), _answering(sent, "large"), False) as gate:
            with pytest.raises(RequestTooLargeError):
                await gate.chat([{"role": "user", "content": "x"}], backend="small")

    anyio.run(main)
    assert sent == ["small"]
