"""The simulator speaking Anthropic's Messages API (``SimProfile(flavor="anthropic")``).

Same serving model as :class:`~gptgate.sim.engine.SimEngine` (slots, timing, rate-limit
buckets, faults); what differs is what a gateway must get right on Anthropic:

* ``POST /v1/messages`` with the key in ``x-api-key`` (or ``Authorization: Bearer``, as the
  anthropic SDK 2.x sends it) and an ``anthropic-version``: a key in any other header (Azure's
  ``api-key``) or none is a 401, a missing version a 400; Messages bodies and SSE events
  (anthropic_wire.py);
* caching **only at ``cache_control`` markers** (≤ 4): a marked prefix shorter than
  ``cache_min_tokens`` is not cached; a request reads the longest cached prefix ending at a
  block boundary up to 20 blocks before one of its markers, and writes every longer marked
  prefix once prefilled. Usage reports ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` *on top of* ``input_tokens``; one cache for the whole
  server (an organisation's), idle TTL ``cache_ttl_s``;
* ``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`` with RFC 3339 resets: one
  token bucket, charged ``prompt + max_tokens`` — not Anthropic's input and output budgets
  apart, so their ``input-tokens`` / ``output-tokens`` families are not sent (a client would
  read them as two budgets of the whole limit each: limits/pacing.py); 429
  ``rate_limit_error`` with ``retry-after``, 529 ``overloaded_error`` when the queue is full,
  and an ``error`` event when an overloaded replica gives up mid-stream;
* the bill: :func:`bill_usd` prices writes at 1.25× and reads at 0.1× the input price.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import AsyncGenerator, Mapping
from datetime import UTC, datetime
from typing import Any

from cachetools import TTLCache

from gptgate.sim import anthropic_wire as aw
from gptgate.sim.anthropic_request import MessagesRequest, parse_messages
from gptgate.sim.anthropic_thinking import Turn
from gptgate.sim.cache import canonical_text
from gptgate.sim.engine import SimEngine, SimReset, SimResponse
from gptgate.sim.faults import Fault
from gptgate.sim.job import Job
from gptgate.sim.ledger import LedgerSnapshot
from gptgate.sim.profiles import SimProfile
from gptgate.sim.request import ChatRequest
from gptgate.sim.scheduler import Replica
from gptgate.sim.wire import ChunkWriter, ResponseMeta, dumps
from gptgate.tokens import CHARS_PER_TOKEN, estimate_text_tokens

__all__ = [
    "ANTHROPIC_PROFILE",
    "CACHE_READ_MULTIPLIER",
    "CACHE_WRITE_MULTIPLIER",
    "AnthropicEngine",
    "bill_usd",
]

MESSAGES_PATH = "/v1/messages"
CACHE_WRITE_MULTIPLIER = 1.25
CACHE_READ_MULTIPLIER = 0.1
#: how far before a marker Anthropic looks for an earlier cached block boundary
_LOOKBACK_BLOCKS = 20

#: a hosted Anthropic-shaped server: Sonnet's 1,024-token minimum, 5-minute cache
ANTHROPIC_PROFILE = SimProfile(
    name="anthropic",
    model="claude-sonnet-4-5",
    hardware="tpu",
    flavor="anthropic",
    replicas=4,
    slots=16,
    max_queue=8,
    ttft_overhead_s=0.3,
    prefill_tokens_per_s=20_000.0,
    base_step_s=0.012,
    rpm=4_000,
    tpm=2_000_000,
    cache_min_tokens=1024,
    cache_block_tokens=128,
)


def bill_usd(snap: LedgerSnapshot, input_per_mtok: float, output_per_mtok: float) -> float:
    """What Anthropic bills for ``snap`` at a model's input and output prices: uncached input
    at the input price, cache writes at 1.25× it, cache reads at 0.1× it (its published
    multipliers, whatever price a client was configured with)."""
    from gptgate.config import Price

    return snap.bill_usd(
        Price(
            input_per_mtok=input_per_mtok,
            output_per_mtok=output_per_mtok,
            cached_input_per_mtok=CACHE_READ_MULTIPLIER * input_per_mtok,
            cache_write_per_mtok=CACHE_WRITE_MULTIPLIER * input_per_mtok,
        )
    )


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(math.ceil(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AnthropicEngine(SimEngine):
    """:class:`SimEngine` behind the Messages API (``SimEngine(profile)`` builds one when
    the profile's flavor is ``"anthropic"``)."""

    def __init__(self, profile: SimProfile | str, **kwargs: Any) -> None:
        super().__init__(profile, **kwargs)
        p = self.profile
        #: marked prefixes written to the cache (digest → None), idle TTL, shared by replicas
        self._prompt_cache: TTLCache[bytes, None] = TTLCache(
            p.cache_max_blocks, p.cache_ttl_s, timer=self.clock.now
        )
        self._write_tokens = 0

    # -- HTTP surface --------------------------------------------------------------------

    async def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, query: str = ""
    ) -> SimResponse:
        if path != MESSAGES_PATH:
            return await super().handle(method, path, headers, body, query)
        request_id = f"req_{self.seed & 0xFFFF:04x}{next(self._ids):012x}"
        base = [("request-id", request_id)]
        if method.upper() != "POST":
            return self._error(405, base, "Method not allowed", "invalid_request_error")
        bearer = headers.get("authorization", "")
        if not headers.get("x-api-key") and not bearer.lower().startswith("bearer "):
            self.ledger.record("client_error")
            return self._error(401, base, "x-api-key header is required", "authentication_error")
        if not headers.get("anthropic-version"):
            self.ledger.record("client_error")
            return self._error(
                400, base, "anthropic-version: header is required", "invalid_request_error"
            )
        return await self._chat(headers, body, base, request_id)

    def _error(
        self,
        status: int,
        headers: list[tuple[str, str]],
        message: str,
        type_: str,
        *,
        code: str | None = None,
        param: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> SimResponse:
        rid = next((v for k, v in headers if k in ("request-id", "x-request-id")), None)
        body = aw.error_body(status, message, rid)
        return SimResponse.json(status, body, headers)

    def _retry_error(
        self,
        status: int,
        headers: list[tuple[str, str]],
        wait_s: float,
        message: str,
        type_: str,
        code: str | None,
    ) -> SimResponse:
        hdrs = [*headers, ("retry-after", str(max(1, math.ceil(wait_s))))]
        return self._error(status, hdrs, message, type_)

    def _fault_status(self, status: int, base: list[tuple[str, str]]) -> SimResponse:
        if status != 503:
            return super()._fault_status(status, base)
        self.ledger.record("server_error")
        return self._error(529, base, "Overloaded", "overloaded_error")

    def _queue_full(self, headers: list[tuple[str, str]]) -> SimResponse:
        self.ledger.record("server_error")
        return self._error(529, headers, "Overloaded", "overloaded_error")

    def _limit_headers(self, now: float) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        rq, tk = self._limiter.requests, self._limiter.tokens
        families = (("requests", rq), ("tokens", tk))
        for name, bucket in families:
            if bucket is None:
                continue
            bucket.refill(now)
            out.append((f"anthropic-ratelimit-{name}-limit", str(int(bucket.limit))))
            out.append((f"anthropic-ratelimit-{name}-remaining", str(max(0, int(bucket.tokens)))))
            # the instant is wall time now plus the wait in the engine's seconds, so a client
            # on the same (scaled or virtual) clock reads back the wait it must pace by
            reset = _rfc3339(time.time() + bucket.reset_s())
            out.append((f"anthropic-ratelimit-{name}-reset", reset))
        return out

    def _models(self, base: list[tuple[str, str]]) -> SimResponse:
        model = {"type": "model", "id": self.profile.model, "display_name": self.profile.model}
        body = dumps({"data": [model], "has_more": False}).encode()
        return SimResponse.json(200, body, base)

    # -- request, cache, bodies ----------------------------------------------------------

    def _parse(self, body: bytes) -> ChatRequest:
        return parse_messages(body, self.profile)

    def _prefix(
        self, chat: ChatRequest, replica: Replica, canonical: str | None, tokens: int
    ) -> tuple[list[bytes], int, None]:
        """Read the longest cached marked prefix; the longer marked ones are written."""
        self._write_tokens = 0
        if not isinstance(chat, MessagesRequest) or not chat.marks:
            return [], 0, None
        low = self.profile.cache_min_tokens
        text = canonical if canonical is not None else canonical_text(chat.messages)
        digests = _boundary_digests(text, chat.ends)
        cache = self._prompt_cache
        read = 0
        for m in reversed(chat.marks):
            for j in range(m, max(-1, m - _LOOKBACK_BLOCKS), -1):
                if chat.ends[j] >= low and digests[j] in cache:
                    cache[digests[j]] = None  # a hit makes it young again
                    read = max(read, chat.ends[j])
                    break
        writes = [m for m in chat.marks if chat.ends[m] >= low and chat.ends[m] > read]
        if writes:
            self._write_tokens = max(chat.ends[m] for m in writes) - read
        return [digests[m] for m in writes], read, None

    def _start(
        self,
        chat: ChatRequest,
        body: bytes,
        replica: Replica,
        canonical: str | None,
        fault: Fault | None,
        *,
        hard: bool = False,
        draws: random.Random | None = None,
    ) -> Job:
        job = super()._start(chat, body, replica, canonical, fault, hard=hard, draws=draws)
        job.cache_write_tokens = self._write_tokens
        tool = getattr(chat, "tool", None)
        if tool is not None:  # a tool call is as long as its arguments, not a drawn answer
            needed = 8 + estimate_text_tokens(json.dumps(aw.tool_input(tool)))
            cap = chat.max_tokens or needed
            job.tokens = min(needed, cap)
            job.finish_reason = "stop" if needed <= cap else "length"
        job.dialect = Turn(tool, getattr(chat, "thinking", False))
        return job

    def _mark_prefilled(self, job: Job) -> None:
        if not job.prefilled:
            job.prefilled = True
            for d in job.digests:
                self._prompt_cache[d] = None

    def _usage(self, job: Job, output: int) -> dict[str, Any]:
        write, read = job.cache_write_tokens, job.cached_tokens
        return aw.usage(job.prompt_tokens - write - read, write, read, output)

    def _completion_body(self, meta: ResponseMeta, job: Job, text: str) -> bytes:
        tool = _tool(job)
        stop = job.finish_reason
        if tool is not None and stop == "stop":
            stop = "tool_calls"
        return aw.message_body(
            meta, text, stop, self._usage(job, job.tokens), tool, thinking=_thinks(job)
        )

    def _writer(self, meta: ResponseMeta, chat: ChatRequest, job: Job) -> ChunkWriter:
        return aw.MessagesWriter(
            meta, self._usage(job, job.tokens), _tool(job), thinking=_thinks(job)
        )

    async def _stream_body(
        self, job: Job, writer: ChunkWriter, fault: Fault | None
    ) -> AsyncGenerator[bytes, None]:
        """An overloaded replica giving up mid-stream sends Anthropic's ``error`` event
        (``overloaded_error``) and ends the body, instead of dropping the connection."""
        inner = super()._stream_body(job, writer, fault)
        try:
            async for chunk in inner:
                yield chunk
        except SimReset:
            if (fault is not None and fault.kind == "reset") or not isinstance(
                writer, aw.MessagesWriter
            ):
                raise
            yield writer.error(529, "Overloaded").encode()
        finally:
            await inner.aclose()


def _tool(job: Job) -> Mapping[str, Any] | None:
    return job.dialect.tool if isinstance(job.dialect, Turn) else None


def _thinks(job: Job) -> bool:
    return isinstance(job.dialect, Turn) and job.dialect.thinking


def _boundary_digests(canonical: str, ends: list[int]) -> list[bytes]:
    """Chained digests of the prompt up to each block boundary."""
    h = hashlib.blake2b(digest_size=16)
    out: list[bytes] = []
    start = 0
    for end in ends:
        stop = end * CHARS_PER_TOKEN
        h.update(canonical[start:stop].encode("utf-8", "surrogatepass"))
        out.append(h.copy().digest())
        start = stop
    return out
