"""The simulator shaped like DeepSeek's API (``SimProfile(flavor="deepseek")``).

DeepSeek speaks OpenAI's chat-completions wire; what differs is where a gateway's bill goes
wrong (issue 32: a ledger reading only OpenAI's field counted 0 of 434,496 cached tokens and
billed 7× the real bill):

* usage reports the context cache at the top level — ``prompt_cache_hit_tokens`` +
  ``prompt_cache_miss_tokens`` = ``prompt_tokens`` — and no ``prompt_tokens_details``;
  ``deepseek-reasoner`` (thinking mode) also reports
  ``completion_tokens_details.reasoning_tokens``, answers with that reasoning in
  ``message.reasoning_content`` or, streamed, sends it first as ``delta.reasoning_content``
  (no ``content``), then the answer or the tool call; and in a tool loop it refuses (400) an
  assistant turn with ``tool_calls`` that does not carry its ``reasoning_content`` back, as
  DeepSeek's thinking-mode docs say;
* a stream carries its usage on its last chunk, the one with the ``finish_reason`` (not on a
  separate ``"choices": []`` chunk);
* the chat path is ``/chat/completions`` under ``https://api.deepseek.com`` (``/v1/…`` works
  too) and the key a Bearer header: a request without one is a 401 ``authentication_error``;
* the cache is built in 64-token units from the prompt's start (nothing below 64 tokens)
  and kept for hours, one for the whole account; a hit costs about a quarter of a miss
  (:data:`DEEPSEEK_PRICE`, deepseek-chat's list price in standard hours). No rate-limit
  headers: a full queue is a 429.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gptgate.config import Price
from gptgate.sim import wire
from gptgate.sim.engine import SimEngine, SimResponse
from gptgate.sim.job import Job
from gptgate.sim.profiles import SimProfile
from gptgate.sim.request import ChatRequest
from gptgate.sim.tools import tool_answer
from gptgate.sim.wire import ChunkWriter, ResponseMeta, dumps
from gptgate.tokens import CHARS_PER_TOKEN

__all__ = ["DEEPSEEK_PRICE", "DEEPSEEK_PROFILE", "DeepSeekEngine", "deepseek_usage"]

_CHAT_PATHS = frozenset({"/chat/completions", "/v1/chat/completions"})

#: deepseek-chat's list price (standard hours): $0.27 a cache miss, $0.07 a hit, $1.10 output
DEEPSEEK_PRICE = Price(input_per_mtok=0.27, cached_input_per_mtok=0.07, output_per_mtok=1.10)

#: a DeepSeek-shaped hosted server: one account-wide cache of 64-token units kept for hours
DEEPSEEK_PROFILE = SimProfile(
    name="deepseek",
    model="deepseek-chat",
    hardware="gpu",
    flavor="deepseek",
    replicas=1,
    slots=64,
    max_queue=64,
    queue_full_status=429,
    ttft_overhead_s=0.4,
    prefill_tokens_per_s=20_000.0,
    base_step_s=0.015,
    cache_min_tokens=64,
    cache_block_tokens=64,
    cache_ttl_s=6 * 3600.0,
)


def deepseek_usage(
    prompt_tokens: int, hit_tokens: int, completion_tokens: int, reasoning_tokens: int = 0
) -> dict[str, Any]:
    """DeepSeek's usage object: the cache at the top level, no ``prompt_tokens_details``."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_cache_hit_tokens": hit_tokens,
        "prompt_cache_miss_tokens": prompt_tokens - hit_tokens,
    }
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


def _reasoning(output: int, model: str) -> int:
    """The part of ``output`` tokens a ``deepseek-reasoner`` spends reasoning (3/4)."""
    return output * 3 // 4 if model.startswith("deepseek-reasoner") else 0


class _FinalChunkUsage(ChunkWriter):
    """DeepSeek's stream: a reasoner's first :func:`_reasoning` tokens as
    ``reasoning_content`` deltas, and the usage riding on the ``finish_reason`` chunk."""

    __slots__ = ("_reason", "_reasoning_chars")

    def __init__(self, meta: ResponseMeta, include_usage: bool, reasoning_tokens: int = 0
                 ) -> None:
        super().__init__(meta, include_usage)
        self._reason = "stop"
        #: characters of the answer's text still to go out as reasoning
        self._reasoning_chars = reasoning_tokens * CHARS_PER_TOKEN

    def thinking(self, piece: str) -> tuple[str, str]:
        left = self._reasoning_chars
        if left <= 0 or not piece:
            return "", piece
        thought, said = piece[:left], piece[left:]
        self._reasoning_chars = left - len(thought)
        return self._chunk(f'{{"content":null,"reasoning_content":{dumps(thought)}}}'), said

    def content(self, piece: str) -> str:
        out, said = self.thinking(piece)
        return out + super().content(said) if said else out

    def finish(self, reason: str, timings_obj: dict[str, Any] | None = None) -> str:
        if not self.include_usage:
            return super().finish(reason, timings_obj)
        self._reason = reason  # written with the usage, next
        return ""

    def usage_chunk(
        self, usage_obj: dict[str, Any], timings_obj: dict[str, Any] | None = None
    ) -> str:
        return (
            f'{self._head}{{}},"logprobs":null,"finish_reason":{dumps(self._reason)}}}],'
            f'"usage":{dumps(usage_obj)}}}\n\n'
        )


class DeepSeekEngine(SimEngine):
    """:class:`SimEngine` with DeepSeek's usage, stream end and auth check
    (``SimEngine(profile)`` builds one when the profile's flavor is ``"deepseek"``)."""

    async def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, query: str = ""
    ) -> SimResponse:
        auth = headers.get("authorization", "")
        if path in _CHAT_PATHS and not (auth.startswith("Bearer ") and auth[7:].strip()):
            self.ledger.record("client_error")
            request_id = f"req_{self.seed & 0xFFFF:04x}{next(self._ids):012x}"
            return self._error(
                401, [("x-request-id", request_id)],
                "Authentication Fails (no such user)", "authentication_error",
                code="invalid_request_error",
            )
        if path in _CHAT_PATHS and self._thinks():
            refused = _dropped_reasoning(body)
            if refused is not None:
                self.ledger.record("client_error")
                return self._error(400, [], refused, "invalid_request_error",
                                   code="invalid_request_error")
        return await super().handle(method, path, headers, body, query)

    def _thinks(self) -> bool:
        return _reasoning(1_000, self.profile.model) > 0

    def _completion_body(self, meta: ResponseMeta, job: Job, text: str) -> bytes:
        """A reasoner's answer: its first :func:`_reasoning` tokens are the
        ``reasoning_content``, the rest the answer (a tool call: the call)."""
        if not self._thinks():
            return super()._completion_body(meta, job, text)
        cut = _reasoning(job.tokens, self.profile.model) * CHARS_PER_TOKEN
        finish, calls = tool_answer(job, meta.id)
        return wire.completion_body(
            meta, text[cut:], finish, self._usage(job, job.tokens), self._timings(job), calls,
            reasoning=text[:cut],
        )

    def _usage(self, job: Job, output: int) -> dict[str, Any]:
        reasoning = _reasoning(output, self.profile.model)
        return deepseek_usage(job.prompt_tokens, job.cached_tokens, output, reasoning)

    def _writer(self, meta: ResponseMeta, chat: ChatRequest, job: Job) -> ChunkWriter:
        return _FinalChunkUsage(
            meta, chat.include_usage, _reasoning(job.tokens, self.profile.model)
        )


#: DeepSeek's answer to a thinking-mode tool loop that dropped the reasoning
_DROPPED = "The `reasoning_content` in the thinking mode must be passed back to the API."


def _dropped_reasoning(body: bytes) -> str | None:
    """The 400 of a thinking-mode request whose assistant turn with ``tool_calls`` carries
    no ``reasoning_content`` (DeepSeek: "for turns that do perform tool calls, the
    reasoning_content must be fully passed back ... in all subsequent requests"), or None.
    An empty one is taken (another model's turn, as AgentScope found)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None  # parse_chat's own 400
    messages = data.get("messages") if isinstance(data, dict) else None
    for message in messages if isinstance(messages, list) else ():
        if (isinstance(message, dict) and message.get("role") == "assistant"
                and message.get("tool_calls") and "reasoning_content" not in message):
            return _DROPPED
    return None
