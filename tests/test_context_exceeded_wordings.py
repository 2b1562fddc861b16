"""The context-window refusals of SGLang, Together and today's vLLM are
``RequestTooLargeError`` too, with the counts they state.

tests/test_context_exceeded.py reads llama-server's, OpenAI's, Anthropic's and vLLM's older
wording ("However, you requested M tokens"). SGLang says "The input (M tokens) is longer
than the model's context length (N tokens)" (Together, a preset, too) or "Requested token
count exceeds the model's maximum context length of N tokens. You requested a total of M
tokens: ...", and vLLM since 0.10 "However, your request has M input tokens" or "'max_tokens'
or 'max_completion_tokens' is too large: X. This model's maximum context length is N tokens
and your request has M input tokens (X > N - M)". Before, the first two were a plain
``BadRequestError``: a prompt too long for an ``sglang`` backend was raised instead of moving
to the backend with the longer window; vLLM's came without the requested count."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.errors import RequestTooLargeError
from gptgate.wire import error_for_status

from .mockbackend import Script, ok


def _sglang(message: str) -> bytes:  # SGLang's ErrorResponse, top level
    return json.dumps({"object": "error", "message": message, "type": "BadRequestError",
                       "param": None, "code": 400}).encode()


def _vllm(message: str) -> bytes:  # vLLM's since 0.10: under "error"
    return json.dumps({"error": {"message": message, "type": "BadRequestError",
                                 "param": None, "code": 400}}).encode()


SGLANG_INPUT = _sglang(
    "The input (5120 tokens) is longer than the model's context length (4096 tokens).")
SGLANG_TOTAL = _sglang(
    "Requested token count exceeds the model's maximum context length of 4096 tokens. You "
    "requested a total of 4600 tokens: 4000 tokens from the input messages and 600 tokens for "
    "the completion. Please reduce the number of tokens in the input messages or the "
    "completion to fit within the limit.")
TOGETHER = json.dumps({"error": {
    "message": "The input (70000 tokens) is longer than the model's context length (65536 "
               "tokens).", "type": "invalid_request_error", "param": None, "code": None,
}}).encode()
VLLM_INPUT = _vllm(
    "This model's maximum context length is 4096 tokens. However, your request has 5000 input "
    "tokens. Please reduce the length of the input messages.")
VLLM_MAX_TOKENS = _vllm(
    "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context "
    "length is 4096 tokens and your request has 3500 input tokens (1000 > 4096 - 3500).")


@pytest.mark.parametrize(
    ("body", "limit", "requested"),
    [(SGLANG_INPUT, 4096, 5120), (SGLANG_TOTAL, 4096, 4600), (TOGETHER, 65536, 70000),
     (VLLM_INPUT, 4096, 5000), (VLLM_MAX_TOKENS, 4096, 4500)],
    ids=["sglang-input", "sglang-total", "together", "vllm-input", "vllm-max-tokens"],
)
def test_the_refusal_is_request_too_large_with_its_counts(
    body: bytes, limit: int, requested: int
) -> None:
    error = error_for_status(400, {}, body, backend="b")
    assert isinstance(error, RequestTooLargeError)
    assert (error.limit, error.requested) == (limit, requested)


async def test_a_prompt_too_long_for_sglang_goes_to_the_longer_window() -> None:
    refusals: list[Any] = []

    def small(request: httpx2.Request) -> httpx2.Response:
        refusals.append(request)
        return httpx2.Response(400, content=SGLANG_INPUT,
                               headers={"content-type": "application/json"})

    script = Script(ok("fits here"))
    short = gg.Backend(name="short", provider="sglang", model="Qwen/Qwen3-8B", signals=False,
                       transport=httpx2.MockTransport(small))
    long = gg.Backend(name="long", provider="vllm", model="Qwen/Qwen3-8B", signals=False,
                      price=gg.Price(input_per_mtok=1.0, output_per_mtok=1.0),
                      transport=httpx2.MockTransport(script))
    async with gg.Gateway([short, long]) as gate:
        result = await gate.chat([{"role": "user", "content": "a long report " * 50}],
                                 max_tokens=20)
        stats = gate.stats()["short"]
    assert result.backend == "long" and result.text == "fits here"
    assert len(refusals) == 1 and stats.circuit == "closed"
