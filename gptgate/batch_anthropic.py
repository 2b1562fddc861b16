"""Anthropic's Message Batches (``/v1/messages/batches``): ``BatchAPI`` for the
``anthropic`` dialect.

A batch is created with its requests inline — ``{"requests": [{"custom_id", "params"}]}``,
``params`` being a Messages request as the dialect builds it live — at most 100,000 requests
or 256 MB; its ``processing_status`` goes ``in_progress`` → ``canceling`` → ``ended``, and once
ended its ``results_url`` serves JSONL lines ``{"custom_id", "result": {"type": ...}}`` with
``type`` ``succeeded`` (the ``message``), ``errored`` (an error envelope), ``canceled`` or
``expired``, in no particular order.

**Durability without metadata.** Anthropic batches carry no metadata and no name, so a batch
whose create answer a crash lost cannot be found by the job's key, as OpenAI's can. The job
records, in ``job_dir`` and *before* the create is sent, when it was sent from
(``PartRecord.created_after``, wall clock); a process taking the job up lists the batches
(newest first) and adopts the one created from then on (less :data:`CLOCK_SKEW_S`) with
exactly the part's number of requests, not held by another part of the job. None: the create
never reached Anthropic, and it is sent. More than one: gptgate refuses to guess and raises
``BatchLookupError`` naming them (cancel the stray one at the console, then resume).

The residual risk, said plainly: another client of the same workspace creating a batch of
exactly the same size inside that window, while this one crashed between the create and its
record, and this job's own create never arriving — then the other client's batch would be
adopted. Results are matched by ``custom_id`` (the input index), so such a batch's answers
would land on this job's items. Use a workspace (API key) of its own for batch jobs where
that matters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import httpx2

from .batch_api import BatchLimits, CreateIntent, ItemResult, RemoteBatch
from .batch_openai import OpenAIBatches, result_records
from .errors import BackendError

__all__ = ["ANTHROPIC_LIMITS", "CLOCK_SKEW_S", "AnthropicBatches", "BatchLookupError"]

#: 100,000 requests or 256 MB a batch (docs.anthropic.com, "Batch processing")
ANTHROPIC_LIMITS = BatchLimits(max_requests=100_000, max_bytes=256 * 1024 * 1024)
#: how far this machine's clock may be ahead of Anthropic's in a lookup
CLOCK_SKEW_S = 300.0
#: how far back a lookup pages (newest first) before it gives up
_MAX_PAGES = 50
#: an errored result's error type → the HTTP status it stands for (the API's error table)
_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
    "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529,
}


#: the inline create body around the request lines
_OPEN, _CLOSE = b'{"requests":[', b"]}"


class BatchLookupError(BackendError):
    """Several batches match a create whose answer was lost: which one is this job's cannot
    be told, and guessing could pay twice or lose the job."""

    retryable = False


class AnthropicBatches(OpenAIBatches):
    """``BatchAPI`` over the anthropic backend's pooled client (its ``x-api-key`` and
    ``anthropic-version`` headers); ``root`` is the batches URL."""

    uploads = False
    #: ``{"requests":[`` and ``]}`` (15 bytes) around lines joined by commas (one fewer than
    #: the newlines the split counts)
    envelope_bytes = len(_OPEN) + len(_CLOSE) - 1

    def __init__(
        self, client: httpx2.AsyncClient, backend: str, limits: BatchLimits = ANTHROPIC_LIMITS,
        *, root: str,
    ) -> None:
        super().__init__(client, backend, limits, root=root.rstrip("/") + "/")

    def request_line(self, custom_id: str, body: bytes) -> bytes:
        params = json.loads(body)
        params.pop("stream", None)  # a batch request is never streamed
        return json.dumps({"custom_id": custom_id, "params": params},
                          separators=(",", ":")).encode()

    async def find_file(self, filename: str) -> str | None:
        return None

    async def upload(self, filename: str, data: bytes) -> str:
        raise NotImplementedError("Anthropic's batches take their requests inline")

    async def find_batch(self, metadata: Mapping[str, str], intent: CreateIntent) -> str | None:
        if intent.not_before is None:  # the create was never sent
            return None
        since = intent.not_before - CLOCK_SKEW_S
        found: list[str] = []
        after: str | None = None
        for _ in range(_MAX_PAGES):
            page = await self._json(
                "GET", "", params={"limit": 100, **({"after_id": after} if after else {})}
            )
            data = [o for o in page.get("data") or [] if isinstance(o, dict)]
            for obj in data:
                created = _epoch(obj.get("created_at"))
                if created is not None and created < since:
                    return self._one(found)
                batch_id = obj.get("id")
                if isinstance(batch_id, str) and batch_id not in intent.taken and \
                        _total(obj.get("request_counts")) == intent.requests:
                    found.append(batch_id)
            if not page.get("has_more") or not data:
                break
            after = str(page.get("last_id") or data[-1].get("id"))
        return self._one(found)

    def _one(self, found: list[str]) -> str | None:
        if len(found) > 1:
            raise BatchLookupError(
                f"a batch create's answer was lost, and {len(found)} batches match it "
                f"({', '.join(found[:5])}): cancel the ones not this job's, then resume",
                backend=self._backend,
            )
        return found[0] if found else None

    async def create(self, file_id: str, metadata: Mapping[str, str], data: bytes) -> str:
        body = _OPEN + b",".join(data.splitlines()) + _CLOSE
        obj = await self._json("POST", "", content=body,
                               headers={"content-type": "application/json"})
        return _batch_id(obj, self._backend)

    async def retrieve(self, batch_id: str) -> RemoteBatch:
        obj = await self._json("GET", batch_id)
        return _remote(obj, self._backend)

    async def cancel(self, batch_id: str) -> None:
        await self._json("POST", f"{batch_id}/cancel")

    async def results(self, batch: RemoteBatch) -> Iterator[ItemResult]:
        if not batch.output_file_id:
            return iter(())
        response = await self._request("GET", batch.output_file_id)
        return _result_lines(response.content)  # parsed as read: see OpenAIBatches


def _batch_id(obj: Mapping[str, Any], backend: str) -> str:
    value = obj.get("id")
    if not isinstance(value, str) or not value:
        raise BackendError("malformed Message Batches response: the batch has no id",
                           backend=backend)
    return value


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _counts(obj: Any) -> dict[str, int]:
    counts = obj if isinstance(obj, dict) else {}
    return {k: v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}


def _total(obj: Any) -> int:
    return sum(_counts(obj).values())


def _remote(obj: Mapping[str, Any], backend: str) -> RemoteBatch:
    """``processing_status`` in OpenAI's words: ``ended`` is ``cancelled`` when it was
    cancelled, ``expired`` when items expired, else ``completed``."""
    counts = _counts(obj.get("request_counts"))
    processing = obj.get("processing_status")
    if processing == "ended":
        if obj.get("cancel_initiated_at") or counts.get("canceled"):
            status = "cancelled"
        elif counts.get("expired"):
            status = "expired"
        else:
            status = "completed"
    elif processing == "canceling":
        status = "cancelling"
    else:
        status = "in_progress"
    results = obj.get("results_url")
    return RemoteBatch(
        id=_batch_id(obj, backend),
        status=status,
        total=sum(counts.values()),
        completed=counts.get("succeeded", 0),
        failed=counts.get("errored", 0) + counts.get("canceled", 0) + counts.get("expired", 0),
        output_file_id=results if isinstance(results, str) and results else None,
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _result_lines(data: bytes) -> Iterator[ItemResult]:
    """``{"custom_id", "result": {"type", "message" | "error"}}`` lines; a line that is not
    one is skipped (its item then ends as "no result")."""
    for obj in result_records(data):
        cid = obj["custom_id"]
        result = _dict(obj.get("result"))
        kind = result.get("type")
        if kind == "succeeded":
            yield ItemResult(cid, 200, result.get("message"))
        elif kind == "errored":
            envelope = _dict(result.get("error"))
            inner = _dict(envelope.get("error")) or envelope
            yield ItemResult(cid, _STATUS.get(str(inner.get("type")), 500), envelope)
        elif kind in ("canceled", "expired"):
            code = "batch_cancelled" if kind == "canceled" else "batch_expired"
            yield ItemResult(cid, None, None, error_code=code)
        else:
            yield ItemResult(cid, None, None, error_code=str(kind or "unknown"))
