"""The simulator's Message Batches (``/v1/messages/batches``), Anthropic's Batch API, in
virtual time.

``SimMessageBatches(engine, plan).attach()`` adds the routes to an :class:`AnthropicEngine`:
a batch is created with its requests inline (``{"requests": [{"custom_id", "params"}]}``, at
most 100,000, custom ids unique), runs for ``plan.complete_after_s`` of the engine's clock
(``processing_status`` ``in_progress``, then ``ended``; ``canceling`` after a cancel), and then
serves its results at ``results_url`` — one JSONL line per request, in shuffled order:
``succeeded`` (a Messages answer), ``errored`` (``fail_rate``: an ``api_error``; a request the
Messages API would refuse: its ``invalid_request_error``), ``expired`` (``expire_rate``) or
``canceled``. Batches carry no metadata, as Anthropic's don't; ``created_at`` is the wall clock
(RFC 3339), as Anthropic's is.

Answers go through the engine's prompt cache at the requests' ``cache_control`` markers (a
batch reads what live traffic or an earlier item wrote, writes what it marks), and the bill
is Anthropic's: uncached input, cache writes at 1.25× and reads at 0.1× the input price,
output — all at the batch discount (:meth:`SimMessageBatches.bill_usd`).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from gptgate.sim import anthropic_wire as aw
from gptgate.sim.anthropic import CACHE_READ_MULTIPLIER, CACHE_WRITE_MULTIPLIER, AnthropicEngine
from gptgate.sim.anthropic_request import parse_messages
from gptgate.sim.engine import SimResponse
from gptgate.sim.openai_batches import SimBatchPlan
from gptgate.sim.request import BadRequest
from gptgate.sim.text import draw_for, output_text
from gptgate.sim.wire import ResponseMeta, dumps

__all__ = ["BATCHES_PATH", "SimMessageBatches"]

BATCHES_PATH = "/v1/messages/batches"
_MAX_REQUESTS = 100_000
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@dataclass(slots=True)
class _Batch:
    id: str
    requests: list[dict[str, Any]]
    created: float
    created_at: str
    status: str = "in_progress"
    cancel_at: float | None = None
    results: bytes | None = None
    counts: dict[str, int] = field(default_factory=dict)


class SimMessageBatches:
    """Anthropic's Message Batches endpoints over an :class:`AnthropicEngine`'s clock."""

    def __init__(self, engine: AnthropicEngine, plan: SimBatchPlan | None = None) -> None:
        self.engine = engine
        self.plan = plan or SimBatchPlan()
        self.batches: dict[str, _Batch] = {}
        #: batches created: a client that resumes must not add to these
        self.creates = 0
        #: what the batches billed (answered items only)
        self.billed_requests = 0
        self.billed_input_tokens = 0
        self.billed_cache_write_tokens = 0
        self.billed_cache_read_tokens = 0
        self.billed_output_tokens = 0
        self._rng = random.Random(self.plan.seed)
        self._ids = 0

    def attach(self) -> SimMessageBatches:
        self.engine.batch_routes = self.handle
        return self

    def bill_usd(
        self, input_per_mtok: float, output_per_mtok: float, discount: float = 0.5
    ) -> float:
        """Anthropic's bill for every answered batch item: its cache multipliers on the input
        price, then the batch discount on all of it."""
        full = (
            self.billed_input_tokens * input_per_mtok
            + self.billed_cache_write_tokens * input_per_mtok * CACHE_WRITE_MULTIPLIER
            + self.billed_cache_read_tokens * input_per_mtok * CACHE_READ_MULTIPLIER
            + self.billed_output_tokens * output_per_mtok
        ) / 1e6
        return full * discount

    # -- HTTP -----------------------------------------------------------------------------

    async def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> SimResponse | None:
        if path != BATCHES_PATH and not path.startswith(BATCHES_PATH + "/"):
            return None
        if not headers.get("x-api-key"):
            return _error(401, "x-api-key header is required")
        if not headers.get("anthropic-version"):
            return _error(400, "anthropic-version: header is required")
        rest = [p for p in path[len(BATCHES_PATH):].split("/") if p]
        method = method.upper()
        if not rest:
            if method == "POST":
                return self._create(body)
            return self._list()
        batch = self.batches.get(rest[0])
        if batch is None:
            return _error(404, f"batch {rest[0]!r} not found")
        if rest[1:] == ["cancel"] and method == "POST":
            self._advance(batch)
            if batch.status == "in_progress":
                batch.cancel_at = self.engine.clock.now()
                batch.status = "canceling"
        elif rest[1:] == ["results"]:
            self._advance(batch)
            if batch.results is None:
                return _error(400, f"batch {batch.id!r} has not ended: no results yet")
            return SimResponse(200, [("content-type", "application/binary")], batch.results)
        return _ok(self._view(batch, headers))

    def _list(self) -> SimResponse:
        batches = sorted(self.batches.values(), key=lambda b: b.id, reverse=True)
        data = [self._view(b, {}) for b in batches]
        return _ok({"data": data, "has_more": False,
                    "first_id": data[0]["id"] if data else None,
                    "last_id": data[-1]["id"] if data else None})

    def _create(self, body: bytes) -> SimResponse:
        limit = self.plan.max_batch_bytes
        if limit is not None and len(body) > limit:
            return _error(413, f"request_too_large: {len(body)} bytes, the most a batch "
                               f"takes is {limit}")
        try:
            req = json.loads(body)
        except ValueError:
            return _error(400, "The request body is not valid JSON.")
        requests = req.get("requests") if isinstance(req, dict) else None
        if not isinstance(requests, list) or not requests:
            return _error(400, "requests: Field required (a non-empty list)")
        if len(requests) > _MAX_REQUESTS:
            return _error(400, f"requests: at most {_MAX_REQUESTS} requests a batch")
        seen: set[str] = set()
        for number, item in enumerate(requests):
            cid = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(cid, str) or not _CUSTOM_ID.match(cid) or cid in seen or \
                    not isinstance(item.get("params"), dict):
                return _error(400, f"requests.{number}: custom_id missing, malformed or "
                                   "repeated, or params not an object")
            seen.add(cid)
        self.creates += 1
        self._ids += 1
        batch = _Batch(f"msgbatch_sim{self._ids:06d}", requests, self.engine.clock.now(),
                       _rfc3339(time.time()))
        self.batches[batch.id] = batch
        return _ok(self._view(batch, {}))

    # -- the batch's life -----------------------------------------------------------------

    def _view(self, batch: _Batch, headers: Mapping[str, str]) -> dict[str, Any]:
        self._advance(batch)
        host = headers.get("host", "127.0.0.1")
        ended = batch.status == "ended"
        counts = batch.counts if ended else {
            "processing": len(batch.requests), "succeeded": 0, "errored": 0, "canceled": 0,
            "expired": 0,
        }
        return {
            "id": batch.id, "type": "message_batch", "processing_status": batch.status,
            "request_counts": dict(counts), "created_at": batch.created_at,
            "ended_at": batch.created_at if ended else None,
            "expires_at": batch.created_at, "archived_at": None,
            "cancel_initiated_at": batch.created_at if batch.cancel_at is not None else None,
            "results_url": f"http://{host}{BATCHES_PATH}/{batch.id}/results" if ended else None,
        }

    def _advance(self, batch: _Batch) -> None:
        if batch.status == "ended":
            return
        now = self.engine.clock.now()
        if batch.cancel_at is not None:
            self._finish(batch, int(len(batch.requests) * self._ran(batch, batch.cancel_at)),
                         "canceled")
        elif self._ran(batch, now) >= 1.0:
            self._finish(batch, len(batch.requests), "expired")

    def _ran(self, batch: _Batch, at: float) -> float:
        span = self.plan.complete_after_s
        return min(1.0, max(0.0, (at - batch.created) / span)) if span > 0 else 1.0

    def _finish(self, batch: _Batch, done: int, unrun: str) -> None:
        """Run the first ``done`` requests (in shuffled order); the rest end ``unrun``."""
        rng, plan = self._rng, self.plan
        order = list(range(len(batch.requests)))
        if plan.shuffle:
            rng.shuffle(order)
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        lines: list[str] = []
        for position, i in enumerate(order):
            item = batch.requests[i]
            cid = item["custom_id"]
            # only a batch that ran to its window's end has expired items: a cancelled one
            # ran the first ``done`` and cancelled the rest
            if position >= done or (unrun == "expired" and rng.random() < plan.expire_rate):
                kind = unrun if position >= done else "expired"
                result: dict[str, Any] = {"type": kind}
            elif rng.random() < plan.fail_rate:
                result = _errored(500, "Internal server error")
            else:
                result = self._answer(batch, item["params"])
            counts[result["type"]] += 1
            lines.append(dumps({"custom_id": cid, "result": result}))
        batch.counts = counts
        batch.results = ("\n".join(lines) + "\n").encode()
        batch.status = "ended"

    def _answer(self, batch: _Batch, params: dict[str, Any]) -> dict[str, Any]:
        """The answer the Messages API would give these params live (the same seeded draw),
        through the prompt cache at their markers, billed at the batch price."""
        engine, p = self.engine, self.engine.profile
        raw = dumps(params).encode()
        try:
            chat = parse_messages(raw, p)
        except BadRequest as error:
            return _errored(400, str(error))
        digests, read, _ = engine._prefix(chat, cast(Any, None), None, chat.prompt_tokens)
        write = engine._write_tokens
        for digest in digests:
            engine._prompt_cache[digest] = None
        draw = draw_for(engine.seed, raw, p.output_tokens_mean, p.output_tokens_sigma,
                        p.output_tokens_max)
        limit = max(1, p.context_tokens - chat.prompt_tokens)
        if chat.max_tokens is not None:
            limit = min(limit, chat.max_tokens)
        output = min(draw.output_tokens, limit)
        uncached = chat.prompt_tokens - write - read
        self.billed_requests += 1
        self.billed_input_tokens += uncached
        self.billed_cache_write_tokens += write
        self.billed_cache_read_tokens += read
        self.billed_output_tokens += output
        meta = ResponseMeta(id=f"chatcmpl-{batch.id}-{draw.text_key:x}", created=0,
                            model=str(params.get("model")), fingerprint="fp_sim_batch",
                            flavor="anthropic")
        stop = "length" if output < draw.output_tokens else "stop"
        body = aw.message_body(meta, output_text(draw.text_key, output), stop,
                               aw.usage(uncached, write, read, output), None)
        return {"type": "succeeded", "message": json.loads(body)}


def _errored(status: int, message: str) -> dict[str, Any]:
    return {"type": "errored", "error": json.loads(aw.error_body(status, message, None))}


def _ok(obj: dict[str, Any]) -> SimResponse:
    body = dumps(obj).encode()
    return SimResponse.json(200, body)


def _error(status: int, message: str) -> SimResponse:
    body = aw.error_body(status, message, None)
    return SimResponse.json(status, body)
