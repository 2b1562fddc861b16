"""``gate.batch(items, backend=..., job_dir=...)``: an offline job through a provider's Batch
API, at the batch price (half the live one at OpenAI, Azure and Anthropic), durable across
crashes.

The hard part is not the upload: it is never losing or paying twice for a job that runs for
hours while processes restart. So the job's *intent* (a key hashed from every request, and the
parts it is split into) is in ``job_dir`` before anything is sent, each provider id is
recorded as soon as it is known (gptgate/batch_store.py), and a process that starts again with
the same items resumes: it polls and collects, and sends nothing already sent. An id it never
got to record (a crash between an upload or a create and its record) is looked up at the
provider — input files by name, batches by metadata, both carrying the job's key — before
anything is sent again.

``BatchJob.wait()`` returns the results in input order, each a ``ChatResult`` or its typed
error; ``retry="live"`` sends the failed and expired items again through ``gate.chat`` (at
the live price), ``retry="batch"`` as one more batch, both under the retry budget and the
dollar budget. The ledger books batch answers at ``price × batch_discount`` in its own
columns; the dollar budget holds the job's estimated cost from submission to its results.

The provider's protocol is a :class:`~gptgate.batch_api.BatchAPI` (OpenAI's Files + Batches:
gptgate/batch_openai.py).

The hook for ``SyncGateway.batch``: run ``Gateway.batch`` on the sync gateway's loop and hand
back a thin wrapper whose ``wait()``, ``cancel()`` and ``refresh()`` run the job's coroutines
there too (``id``, ``status``, ``counts``, ``batch_ids`` are plain reads); nothing in here
assumes the caller's thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio

from .batch_anthropic import BatchLookupError
from .batch_api import TERMINAL, BatchAPI, BatchLimits, CreateIntent, ItemResult, RemoteBatch
from .batch_apis import batch_api_for, batch_model
from .batch_budget import job_refused, retry_refused
from .batch_cache import BatchCache
from .batch_share import adopt
from .batch_store import JobInUse, JobRecord, JobStore, PartRecord, ranges_of
from .budget import BudgetGate, BudgetHold
from .call_checks import check_params, validate_messages
from .config import Backend
from .errors import (
    BackendError,
    BadRequestError,
    BatchCancelledError,
    BatchItemsError,
    BudgetExceededError,
    GateError,
    RateLimitedError,
    RequestTimeout,
)
from .media_tokens import media_rule
from .results import ChatResult, Usage
from .tokens import estimate_prompt_tokens, estimate_text_tokens, estimate_tools_tokens
from .wire.aborted import billed_failure_usage, refuse_aborted
from .wire.dialect import Dialect

if TYPE_CHECKING:
    from .gateway import Gateway

__all__ = ["BatchCounts", "BatchJob", "RetryMode", "submit_batch", "take_up_batch"]

log = logging.getLogger("gptgate")

RetryMode = Literal["live", "batch"] | None
T = TypeVar("T")

#: chat() arguments that steer the live path: kept for a live retry, never in a batch body
_LIVE_ONLY = frozenset(
    {"scenario", "priority", "timeout", "max_attempts", "cache_key", "hedge", "accept",
     "private", "tier", "backend", "cache"}
)
#: what a request without ``max_tokens`` reserves of the dollar budget (as a live call does)
_DEFAULT_MAX_TOKENS = 1024
#: tries of one batch-management request (upload, create, poll) over transient failures
_API_TRIES = 5
#: how often the polling interval grows, and its ceiling in multiples of the first
_POLL_GROWTH, _POLL_CEILING = 1.5, 20.0


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """``job.counts``: items in the job, answered, and failed (so far, or in the end)."""

    total: int
    completed: int
    failed: int


@dataclass(slots=True)
class _Request:
    """One item, ready to send either way: its request body and its ``chat`` arguments."""

    body: bytes
    kwargs: dict[str, Any]
    prompt_tokens: int
    max_tokens: int | None


def _prepare(
    index: int, item: object, common: Mapping[str, Any], model: str, dialect: Dialect
) -> tuple[dict[str, Any], bytes, int, int | None]:
    """An item's merged ``chat`` arguments, its request body (built by the backend's
    dialect, as a live call's: ``gate.chat``'s checks, the dialect's parameter rules and
    ``extra_body`` apply), prompt size and answer cap; a ``BadRequestError`` naming the item
    when it cannot be one."""
    if not isinstance(item, Mapping):
        raise BadRequestError(
            f"item {index} must be a dict of chat arguments, not {type(item).__name__}"
        )
    kwargs = {**common, **item}
    messages = kwargs.get("messages")
    if not isinstance(messages, list | tuple) or not messages or not all(
        isinstance(m, Mapping) for m in messages
    ):
        raise BadRequestError(f"item {index} needs 'messages': a non-empty list of dicts")
    if kwargs.get("stream"):
        raise BadRequestError(f"item {index}: a Batch API request is never streamed")
    if "custom_id" in kwargs:  # else a chat parameter in the body: every item a 400, late
        raise BadRequestError(
            f"item {index}: custom_id is not a chat parameter; gptgate numbers the requests "
            "itself and wait() returns the results in input order (results[i] answers "
            "items[i]): keep your own ids beside the items"
        )
    if "extra_headers" in kwargs:  # no request line has headers: else a body parameter
        raise BadRequestError(
            f"item {index}: extra_headers cannot go in a Batch API request (its lines carry "
            "no headers; the batch runs under the backend's own key and headers): set "
            "Backend(headers=...) on a backend for the job, or send the item with gate.chat"
        )
    params = {k: v for k, v in kwargs.items() if k not in _LIVE_ONLY and k != "messages"}
    try:
        validate_messages(messages)  # as gate.chat checks them: else a 400 per item, late
        check_params(params)
        body = dialect.build_body(model, messages, params, stream=False)
    except BadRequestError as error:
        raise BadRequestError(f"item {index}: {error.message}") from None
    cap = params.get("max_completion_tokens", params.get("max_tokens"))
    max_tokens = cap if isinstance(cap, int) and not isinstance(cap, bool) else None
    media = media_rule([(dialect.name, params.get("model") or model)])
    prompt = estimate_prompt_tokens(messages, media) + estimate_tools_tokens(params.get("tools"))
    return kwargs, body, prompt, max_tokens


#: an item's arguments that are no request parameter (what ``gate.chat`` names itself)
_NOT_PARAMS = _LIVE_ONLY | {"messages", "stream"}


def _custom_id(index: int, round_: int) -> str:
    return str(index) if round_ == 0 else f"{index}-r{round_}"


def _index_of(custom_id: str) -> int | None:
    head = custom_id.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _split(
    lines: Mapping[int, bytes], indices: list[int], api: BatchAPI, prefix: str, round_: int
) -> list[PartRecord]:
    """Parts of at most ``api.limits`` requests and bytes each (the API's envelope
    included), in input order."""
    limits = api.limits
    room = limits.max_bytes - api.envelope_bytes
    parts: list[PartRecord] = []
    current: list[int] = []
    size = 0
    for index in indices:
        length = len(lines[index]) + 1
        if current and (len(current) >= limits.max_requests or size + length > room):
            parts.append(_part(prefix, round_, len(parts), current))
            current, size = [], 0
        if length > room:
            raise BadRequestError(
                f"item {index} is {length} bytes: more than a batch file may hold "
                f"({limits.max_bytes})"
            )
        current.append(index)
        size += length
    if current:
        parts.append(_part(prefix, round_, len(parts), current))
    return parts


def _part(prefix: str, round_: int, number: int, indices: list[int]) -> PartRecord:
    return PartRecord(name=f"{prefix}-r{round_}-p{number}", ranges=ranges_of(indices), round=round_)


async def submit_batch(
    gate: Gateway,
    items: Iterable[Mapping[str, Any]],
    *,
    backend: str | None,
    job_dir: str | os.PathLike[str],
    retry: RetryMode,
    scenario: Any,
    poll_s: float,
    limits: BatchLimits | None,
    common: Mapping[str, Any],
    spending: BudgetGate | None,
    send: bool = True,
) -> BatchJob:
    """Submit (or resume) the job recorded in ``job_dir``: what ``Gateway.batch`` does.
    ``send=False``: take the recorded job up without sending anything (:func:`take_up_batch`)."""
    if retry not in (None, "live", "batch"):
        raise BadRequestError(f"retry must be 'live', 'batch' or None, not {retry!r}")
    if isinstance(poll_s, bool) or not isinstance(poll_s, int | float) or not poll_s > 0:
        raise BadRequestError(f"poll_s must be a positive number of seconds, not {poll_s!r}")
    if not isinstance(job_dir, str | os.PathLike):
        raise BadRequestError(f"job_dir must be a path, not {type(job_dir).__name__}")
    if not os.fspath(job_dir):  # else the current directory, beside whatever it holds
        raise BadRequestError("job_dir must name a directory, not ''")
    config = _backend(gate, backend)
    state = gate.backend_state(config.name)  # raises while the gateway is not open
    try:
        source = list(items)
    except TypeError:
        raise BadRequestError("items must be an iterable of dicts of chat arguments") from None
    if not source:
        raise BadRequestError("a batch job needs at least one item")
    dialect = state.pool.dialect
    api = batch_api_for(dialect, state.pool.client, config, limits)
    requests: list[_Request] = []
    lines: list[bytes] = []
    digest = hashlib.sha256(f"{config.name}\n{config.model}\n".encode())
    refused: dict[int, str] = {}
    for index, item in enumerate(source):
        try:
            kwargs, body, prompt, cap = _prepare(index, item, common, batch_model(config),
                                                 dialect)
        except BadRequestError as error:  # every such item named at once, nothing sent
            refused[index] = error.message
            continue
        lines.append(api.request_line(_custom_id(index, 0), body))
        digest.update(lines[-1] + b"\n")
        requests.append(_Request(body, kwargs, prompt, cap))
    if refused:
        raise BatchItemsError(refused)
    key = digest.hexdigest()
    cache = BatchCache(gate, config, [r.kwargs for r in requests], _NOT_PARAMS)
    if not send and not JobStore(job_dir).path.exists():  # looking only: create nothing
        raise _no_job(job_dir)
    job = BatchJob(gate, api, JobStore(job_dir), config, requests, retry=retry,
                   scenario=scenario, poll_s=float(poll_s), spending=spending, dialect=dialect,
                   cache=cache)
    with job._store.locked():
        await _take_up(job, key, lines, send)
    if job.resumed:
        log.info("batch job %s resumed from %s", job.id, job.job_dir)
    return job


async def take_up_batch(
    gate: Gateway,
    items: Iterable[Mapping[str, Any]],
    *,
    job_dir: str | os.PathLike[str],
    backend: str | None = None,
    retry: RetryMode = None,
    scenario: Any = None,
    poll_s: float = 30.0,
    limits: BatchLimits | None = None,
    **common: Any,
) -> BatchJob:
    """The job recorded in ``job_dir`` for these ``items``, taken up **without sending
    anything**: to see where it is, or to cancel it, when its submission stopped part-way (a
    create the provider refused — OpenAI's "Enqueued token limit reached" — or a crash).
    ``gate.batch`` would first send the parts never created; ``job.cancel()`` here ends them
    unsent. It takes ``gate.batch``'s arguments: those added to every item must be the
    submission's (the job is the hash of its requests); ``limits`` changes nothing of a
    recorded job. No job recorded there: ``BadRequestError``."""
    return await submit_batch(
        gate, items, backend=backend, job_dir=job_dir, retry=retry, scenario=scenario,
        poll_s=poll_s, limits=limits, common=common, spending=gate._spending, send=False,
    )


async def _take_up(job: BatchJob, key: str, lines: list[bytes], send: bool = True) -> None:
    """Record the intent of a new job, or take up the one recorded; then send what is
    unsent (``send``; never for a cancelled job). Runs under ``job_dir``'s lock: what is read
    here is what is true."""
    store, config, spending = job._store, job._backend, job._spending
    record = store.load()
    if record is not None and record.key != key:
        raise BadRequestError(
            f"job_dir {job.job_dir!r} holds another job ({record.items} items for backend "
            f"{record.backend!r}): these items differ; use a new job_dir"
        )
    if record is None and not send:
        raise _no_job(job.job_dir)
    job.resumed = record is not None
    indices = list(range(len(lines)))
    if record is None:  # items the response cache answers are kept, not sent
        store.forget_answers()  # of a job never recorded here: not this one's
        answered = await job.cache.answered()
        store.keep_answers(answered)
        indices = [i for i in indices if i not in answered]
    estimate = job.estimate(indices)
    priced = spending is not None and estimate > 0
    if record is None:
        # split first: an item no batch file can hold is refused before the budget holds
        # (or waits for) anything
        prefix = f"gptgate-{key[:16]}"
        parts = _split(dict(enumerate(lines)), indices, job._api, prefix, 0)
    try:
        if record is None:
            if priced:
                assert spending is not None
                try:
                    job.holds.append(await spending.admit(estimate, priority=0))
                except BudgetExceededError as error:
                    raise job_refused(error, len(indices), estimate) from None
            record = JobRecord(key=key, backend=config.name, items=len(lines),
                               retry=job._retry, parts=parts)
            store.save(record)  # the intent, before anything is sent
        elif spending is not None and not record.settled:
            # submitted earlier: what its parts not booked yet may cost settles here
            unbooked = [i for p in record.parts if not p.booked for i in p.indices()]
            job.holds.append(spending.commit(job.estimate(unbooked)))
        job.record = record
        if record.cancelled:  # a cancelled job sends nothing new: unsent parts end here
            await job.drop_unsent()
        elif send:
            for part in record.parts:
                await job.submit_part(part)
        else:  # looking only: a create a crash lost the answer of is found, not sent
            await job.find_lost()
    except BaseException:
        job.release_holds()
        raise


def _no_job(job_dir: str | os.PathLike[str]) -> BadRequestError:
    return BadRequestError(
        f"job_dir {os.fspath(job_dir)!r} holds no batch job: submit it first (gate.batch)"
    )


def _backend(gate: Gateway, name: str | None) -> Backend:
    backends = gate.config.backends
    if name is None:
        if len(backends) != 1:
            raise BadRequestError(
                "gate.batch needs backend=NAME with more than one backend configured"
            )
        return backends[0]
    if not isinstance(name, str):
        raise BadRequestError(f"backend must be a backend's name, not {type(name).__name__}")
    return gate._configured(name)


class BatchJob:
    """One offline job at a provider's Batch API: ``id``, ``status``, ``counts``,
    ``await wait()``, ``await cancel()`` (from ``await gate.batch(...)``)."""

    def __init__(
        self,
        gate: Gateway,
        api: BatchAPI,
        store: JobStore,
        backend: Backend,
        requests: list[_Request],
        *,
        retry: RetryMode,
        scenario: Any,
        poll_s: float,
        spending: BudgetGate | None,
        dialect: Dialect,
        cache: BatchCache,
    ) -> None:
        self._gate = gate
        #: the response cache's side of the job (gptgate/batch_cache.py)
        self.cache = cache
        #: the backend's wire: it reads the answers as it built the requests
        self._dialect = dialect
        self._api = api
        self._store = store
        self._backend = backend
        self._requests = requests
        self._retry = retry
        self._scenario = scenario
        self._poll_s = poll_s
        self._spending = spending
        #: this process found the job recorded in ``job_dir`` and took it up
        self.resumed = False
        self.record: JobRecord | None = None
        self.holds: list[BudgetHold | None] = []
        #: per part name: its items' outcomes, downloaded and read once
        self._downloaded: dict[str, dict[int, ChatResult | GateError]] = {}
        self._results: list[ChatResult | GateError] | None = None
        self._submitted_at = gate.clock.now()
        #: per part name: the provider's batch as last polled
        self._remote: dict[str, RemoteBatch] = {}
        #: items whose failure was sent again live (``gate.chat`` booked them itself)
        self._live: set[int] = set()
        #: parts whose items this process booked (``job.json`` says so once the job settles)
        self._booked_parts: set[str] = set()
        #: one waiter polls, collects, retries and books; the others wait for its results
        #: (each doing it too would trip the job's own send lock and book the job twice)
        self._waiting = anyio.Lock()

    def __repr__(self) -> str:
        return f"BatchJob(id={self.id!r}, status={self.status!r}, counts={self.counts!r})"

    # -- what a caller reads --------------------------------------------------------------

    @property
    def _job(self) -> JobRecord:
        assert self.record is not None
        return self.record

    @property
    def id(self) -> str:
        """The job's own id: the same in every process that resumes it."""
        return f"gptgate-{self._job.key[:16]}"

    @property
    def job_dir(self) -> str:
        return os.fspath(self._store.dir)

    @property
    def batch_ids(self) -> list[str]:
        """The provider's batch ids, one per part (and retry round)."""
        return [p.batch_id for p in self._job.parts if p.batch_id is not None]

    @property
    def status(self) -> str:
        """``submitting``, the provider's ``validating`` / ``in_progress`` / ``finalizing``,
        ``cancelling``; once every part ended: ``completed``, ``cancelled``, ``expired`` or
        ``failed`` (the worst of the parts) — once ``wait()`` returned, of the parts whose
        items ended unanswered: a part whose failures a later round answered is behind them
        (a job whose every item was answered is ``completed``)."""
        parts = self._job.parts
        running = [p.status or ("validating" if p.batch_id else "submitting")
                   for p in parts if p.status not in TERMINAL]
        if running:  # the part furthest behind: a part not created yet is "submitting"
            return "cancelling" if self._job.cancelled else min(running, key=_behind)
        if self._results is not None:
            source = self._sources()
            parts = [source[i] for i, r in enumerate(self._results)
                     if not isinstance(r, ChatResult) and i in source]
        for worst in ("cancelled", "expired", "failed"):
            if any(p.status == worst for p in parts):
                return worst
        return "completed"

    @property
    def counts(self) -> BatchCounts:
        """Total, answered and failed items: exact once ``wait()`` returned, else the
        provider's last reported counts (an item sent again counts once)."""
        total = self._job.items
        if self._results is not None:
            ok = sum(isinstance(r, ChatResult) for r in self._results)
            return BatchCounts(total, ok, total - ok)
        completed = failed = retried = 0
        for part in self._job.parts:
            remote = self._remote.get(part.name)
            if remote is not None:
                completed += remote.completed
                failed += remote.failed
            if part.round > 0:
                retried += len(part.indices())
        return BatchCounts(total, completed, max(0, failed - retried))

    # -- submitting -----------------------------------------------------------------------

    def _metadata(self, part: PartRecord) -> dict[str, str]:
        return {"gptgate_job": self._job.key[:40], "gptgate_part": part.name}

    def _save(self) -> None:
        self._take_in()  # another process's parts and cancel are not written over
        self._store.save(self._job)

    def _take_in(self) -> list[PartRecord]:
        """What another process recorded for this job since this one read it
        (gptgate/batch_share.py): the parts it created, their ids, a cancel."""
        try:
            return adopt(self._job, self._store.load())
        except BadRequestError:  # unreadable: this process's record is written over it
            return []

    async def submit_part(self, part: PartRecord, *, look: bool = False) -> None:
        """Upload and create ``part``'s batch, unless that was done: recorded here, or (after
        a crash before its record) found at the provider by the job's key — or, where
        batches carry no metadata, by the create's recorded intent (``CreateIntent``).
        ``look``: found first whether or not this job was taken up (a part another process
        recorded)."""
        if part.batch_id is not None or part.status in TERMINAL:
            return
        meta = self._metadata(part)
        resumed = self.resumed or look
        if resumed:
            found = await self._call(self._api.find_batch, meta, self._intent(part))
            if found is not None:
                part.batch_id = found
                self._save()
                return
        data = b""
        if self._api.uploads and part.file_id is None:
            filename = f"{part.name}.jsonl"
            found = await self._call(self._api.find_file, filename) if resumed else None
            if found is None:
                data = self._data(part)
                found = await self._once(
                    lambda: self._api.upload(filename, data),
                    lambda: self._api.find_file(filename),
                )
            part.file_id = found
            self._save()
        elif not self._api.uploads:
            data = self._data(part)
        file_id = part.file_id or ""
        part.created_after = time.time()
        self._save()  # when the create may have happened from: the lookup's lower bound
        part.batch_id = await self._once(
            lambda: self._api.create(file_id, meta, data),
            lambda: self._api.find_batch(meta, self._intent(part)),
        )
        if self._job.cancelled:  # cancelled while this create was on its way
            await self._call(self._api.cancel, part.batch_id)
            part.status = "cancelling"
        self._save()

    def _data(self, part: PartRecord) -> bytes:
        return b"\n".join(self._line(i, part.round) for i in part.indices()) + b"\n"

    def _intent(self, part: PartRecord) -> CreateIntent:
        taken = frozenset(p.batch_id for p in self._job.parts if p.batch_id is not None)
        return CreateIntent(len(part.indices()), part.created_after, taken)

    def _line(self, index: int, round_: int) -> bytes:
        return self._api.request_line(_custom_id(index, round_), self._requests[index].body)

    async def _call(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """An idempotent request (a lookup, a poll), tried again over transient failures."""
        return await self._tries(call, args)

    async def _once(
        self, call: Callable[[], Awaitable[str]], find: Callable[[], Awaitable[str | None]]
    ) -> str:
        """A request that must happen once (an upload, a create): after a transient failure
        it may have happened anyway, so look (``find``) before trying again."""
        return await self._tries(call, (), find)

    async def _tries(
        self,
        call: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        find: Callable[[], Awaitable[T | None]] | None = None,
    ) -> T:
        wait = 1.0
        for attempt in range(_API_TRIES):
            try:
                return await call(*args)
            except GateError as error:
                if not error.retryable or attempt == _API_TRIES - 1:
                    raise
                await self._gate.clock.sleep(error.retry_after or wait)
                wait *= 2
                found = None if find is None else await self._call(find)
                if found is not None:
                    return found
        raise AssertionError("unreachable")

    # -- polling --------------------------------------------------------------------------

    async def refresh(self) -> str:
        """Poll every part still running once; returns the job's status. A part that ended
        before this process saw it (a job taken up after it finished) is read once, for its
        counts: its record keeps only its status."""
        for part in self._job.parts:
            if part.batch_id is None or (part.name in self._remote and part.status in TERMINAL):
                continue
            if part.status in TERMINAL:
                with contextlib.suppress(GateError):  # counts only: the status is recorded
                    self._remote[part.name] = await self._api.retrieve(part.batch_id)
                continue
            remote = await self._call(self._api.retrieve, part.batch_id)
            self._remote[part.name] = remote
            if remote.status != part.status:
                part.status = remote.status
                part.output_file_id = remote.output_file_id
                part.error_file_id = remote.error_file_id
                part.errors = remote.errors
                self._save()
        return self.status

    async def _poll(self) -> str:
        """``refresh``, riding out a provider outage: a job runs for hours, and a poll that
        fails now (after ``_call``'s tries) is simply made again at the next interval."""
        try:
            return await self.refresh()
        except GateError as error:
            if not error.retryable:
                raise
            log.warning("batch job %s: polling failed (%s); polling on", self.id, error)
            return self.status

    async def cancel(self) -> None:
        """Cancel every part still running: what the provider finished is still returned by
        ``wait()``; the rest ends in ``BatchCancelledError``. Nothing is sent again, and a
        part never created (a submission stopped part-way) never will be."""
        self._job.cancelled = True
        self._save()
        await self.drop_unsent()
        for part in self._job.parts:
            if part.batch_id is not None and part.status not in (*TERMINAL, "cancelling"):
                await self._call(self._api.cancel, part.batch_id)
                part.status = "cancelling"
        self._save()

    async def find_lost(self) -> None:
        """Record the batches whose create reached the provider before a crash lost their
        id (looked up, nothing sent): a job taken up to be seen shows them running."""
        for part in self._job.parts:
            if part.batch_id is None and part.created_after is not None and \
                    part.status not in TERMINAL:
                try:
                    found = await self._call(self._api.find_batch, self._metadata(part),
                                             self._intent(part))
                except BatchLookupError as error:  # shown, not guessed: cancel() raises it
                    log.warning("batch job %s, part %s: %s", self.id, part.name, error)
                    continue
                if found is not None:
                    part.batch_id = found
                    self._save()

    async def drop_unsent(self) -> None:
        """End the parts of a cancelled job that were never created, unsent. One whose create
        may have reached the provider (recorded as sent, its id lost to a crash) is looked up
        there first, and cancelled if found."""
        for part in self._job.parts:
            if part.batch_id is not None or part.status in TERMINAL:
                continue
            if part.created_after is not None:
                found = await self._call(self._api.find_batch, self._metadata(part),
                                         self._intent(part))
                if found is not None:
                    part.batch_id = found
                    await self._call(self._api.cancel, found)
                    part.status = "cancelling"
                    continue
            part.status = "cancelled"
        self._save()

    async def wait(self) -> list[ChatResult | GateError]:
        """Poll (with back-off) until every part ended, collect, retry what the ``retry``
        mode says, book the cost; the results in input order. Tasks awaiting one job share
        one collection; a waiter cancelled mid-way hands the work to the next."""
        async with self._waiting:
            if self._results is None:
                self._results = await self._wait()
            return list(self._results)

    async def _wait(self) -> list[ChatResult | GateError]:
        interval = self._poll_s
        while True:
            if await self._poll() in TERMINAL and all(
                p.status in TERMINAL for p in self._job.parts
            ):
                outcomes = await self._collect()
                await self._book(outcomes)  # before a retry round asks the budget for room
                more = await self._retry_when_free(outcomes)
                if not more:
                    break
                continue
            await self._gate.clock.sleep(interval)
            interval = min(interval * _POLL_GROWTH, self._poll_s * _POLL_CEILING)
        return await self._settle(outcomes)

    # -- collecting -----------------------------------------------------------------------

    async def _collect(self) -> dict[int, ChatResult | GateError]:
        """Every item's outcome from every part (a later round's replaces an earlier one)."""
        outcomes: dict[int, ChatResult | GateError] = {}
        for part in sorted(self._job.parts, key=lambda p: p.round):
            if part.name not in self._downloaded:
                self._downloaded[part.name] = await self._part_outcomes(part)
            outcomes.update(self._downloaded[part.name])
        unsent = set(range(self._job.items)) - {i for p in self._job.parts for i in p.indices()}
        if unsent:  # answered from the response cache at submission (kept in job_dir)
            kept = self._store.load_live()
            for index in unsent:
                outcomes[index] = kept.get(index) or BackendError(
                    "the batch ended without a result for this item", backend=self._backend.name
                )
            self._live |= unsent
        return outcomes

    async def _part_outcomes(self, part: PartRecord) -> dict[int, ChatResult | GateError]:
        """Each of ``part``'s items' outcome, read from its result files a line at a time:
        a line's parsed answer is let go once it is a ``ChatResult`` (or an error), so only
        the files' bytes and the results are held — not also every parsed line until the
        job ends (the peak of ``wait()`` was 6.6× the output file, 4.3× now:
        benchmarks/batch_collect_memory.py)."""
        remote = RemoteBatch(
            id=part.batch_id or "", status=part.status or "", total=0, completed=0, failed=0,
            output_file_id=part.output_file_id, error_file_id=part.error_file_id,
        )
        mine = set(part.indices())
        found: dict[int, ChatResult | GateError] = {}
        for line in await self._call(self._api.results, remote):
            index = _index_of(line.custom_id)
            if index is not None and index in mine and index not in found:
                found[index] = self._outcome(index, line)
        for index in mine - found.keys():
            found[index] = self._missing(part)
        return found

    def _outcome(self, index: int, line: ItemResult) -> ChatResult | GateError:
        name = self._backend.name
        if line.status is None:
            return _item_error(line, name)
        body = json.dumps(line.body).encode()
        if line.status >= 300:
            return self._dialect.error_for_status(line.status, None, body, backend=name)
        try:  # an answer its server cut off is a failed item, retried as a 5xx is
            parsed = refuse_aborted(
                self._dialect.parse_response(body, backend=name, status=line.status), name, None
            )
        except GateError as error:
            return error
        request = self._requests[index]
        usage = parsed.usage or Usage(
            input_tokens=request.prompt_tokens,
            output_tokens=estimate_text_tokens(parsed.text),
            estimated=True,
        )
        self._gate.ledger.learn_model(name, parsed.model)  # an Azure deployment's model
        cost = self._gate.ledger.batch_cost(name, usage, self._backend.batch_discount)
        return ChatResult(
            text=parsed.text,
            finish_reason=parsed.finish_reason,
            backend=name,
            hardware=self._backend.hardware,
            model=parsed.model or self._backend.model,
            streamed=False,
            attempts=1,
            usage=usage,
            billed_usage=usage,
            ttft_s=None,
            latency_s=max(0.0, self._gate.clock.now() - self._submitted_at),
            queue_s=0.0,
            cost_usd=cost,
            scenario="batch",
            stream_decision="batch api",
            response_id=parsed.response_id,
            raw=parsed.raw,
        )

    def _missing(self, part: PartRecord) -> GateError:
        """An item with no line in the result files: what its batch's end says."""
        name = self._backend.name
        if part.status == "expired":
            return RequestTimeout(
                "the batch expired (its 24 h window) before this item ran", backend=name
            )
        if part.status in ("cancelled", "cancelling"):
            return BatchCancelledError("the batch was cancelled before this item ran",
                                       backend=name)
        if part.status == "failed" and _over_enqueued_limit(part.errors):
            return RateLimitedError(  # the queue was full: the same batch goes in later
                f"the provider refused the batch for now: {part.errors} (retry='batch' sends "
                "these items again once the job's other batches have ended)", backend=name,
            )
        if part.status == "failed":
            return BadRequestError(f"the provider refused the batch: {part.errors or 'failed'}",
                                   backend=name)
        return BackendError("the batch ended without a result for this item", backend=name)

    # -- failed items ---------------------------------------------------------------------

    def _retryable(self, outcomes: Mapping[int, ChatResult | GateError], round_: int) -> list[int]:
        """Failed items of the latest round that trying again can help, under the retry
        budget (every batch item counts as a request that funds it) — except the items of a
        part the provider's full queue refused whole: none of them ran, so sending them is
        no retry (under the budget, a refused part of 10,000 items had 10% of them sent)."""
        budget = self._gate.retry_budget
        now = self._gate.clock.now()
        if budget is not None:
            for _ in range(len(outcomes) if round_ == 0 else 0):
                budget.record_request(now)
        never_ran = {
            i for p in self._job.parts
            if p.status == "failed" and _over_enqueued_limit(p.errors) for i in p.indices()
        }
        chosen: list[int] = []
        for index in sorted(outcomes):
            outcome = outcomes[index]
            if isinstance(outcome, GateError) and outcome.retryable:
                if budget is not None and index not in never_ran and not budget.try_spend(now):
                    continue
                chosen.append(index)
        return chosen

    async def _retry_when_free(self, outcomes: dict[int, ChatResult | GateError]) -> bool:
        """:meth:`_retry_round` under ``job_dir``'s lock; while another process holds it
        (sending this job's retry round, or its live retries), wait for it — then take in
        what it recorded — rather than fail a ``wait()`` whose job is doing fine."""
        while True:
            try:
                with self._store.locked():  # sends again: one process at a time
                    return await self._retry_round(outcomes)
            except JobInUse:
                await self._gate.clock.sleep(self._poll_s)

    async def _retry_round(self, outcomes: dict[int, ChatResult | GateError]) -> bool:
        """Send failed items again as the ``retry`` mode says; True when a new batch round
        was started — here or, found in the record, by another process (poll on) — False
        when the outcomes are final."""
        job = self._job
        for part in self._take_in():  # another process's retry round: poll it, not again
            if part.batch_id is None and part.status not in TERMINAL and not job.cancelled:
                await self.submit_part(part, look=True)  # it died creating it: look first
        if any(p.status not in TERMINAL for p in job.parts):
            return True
        if self._retry is None or job.cancelled:
            return False
        latest = max(p.round for p in job.parts)
        if self._retry == "batch":
            if latest >= 1:
                return False
            indices = self._retryable(outcomes, 0)
            if not indices:
                return False
            try:
                await self._admit(indices)
            except BudgetExceededError as error:  # the answers collected stay: see _book
                log.warning("batch job %s: no retry round: %s", self.id, error.message)
                retry_refused(outcomes, indices, error, self._backend.name)
                return False
            self._take_in()
            if job.cancelled:  # while the budget made the round wait: it is not created
                self.release_holds()
                return False
            lines = {i: self._line(i, 1) for i in indices}
            parts = _split(lines, indices, self._api, f"gptgate-{job.key[:16]}", 1)
            job.parts.extend(parts)
            self._save()  # the retry round's intent
            for part in parts:
                await self.submit_part(part)
            return True
        kept = self._store.load_live()  # sent live by an earlier process: not again
        for index, result in kept.items():
            outcomes[index] = result
        indices = [i for i in self._retryable(outcomes, 0) if i not in kept]
        if indices:

            def keep(position: int, outcome: ChatResult | GateError) -> None:
                if isinstance(outcome, ChatResult):
                    self._store.append_live(indices[position], outcome)

            live = await self._gate.map(
                [self._requests[i].kwargs for i in indices], scenario=self._scenario,
                on_result=keep,
            )
            for index, outcome in zip(indices, live, strict=True):
                outcomes[index] = outcome
        self._live = set(indices) | set(kept)
        return False

    async def _admit(self, indices: list[int]) -> None:
        estimate = self.estimate(indices)
        if self._spending is not None and estimate > 0:
            self.holds.append(await self._spending.admit(estimate, priority=0))

    def _sources(self) -> dict[int, PartRecord]:
        """The part each item's outcome comes from: the latest round that sent it."""
        source: dict[int, PartRecord] = {}
        for part in sorted(self._job.parts, key=lambda p: p.round):
            source.update(dict.fromkeys(part.indices(), part))
        return source

    # -- money ----------------------------------------------------------------------------

    def estimate(self, indices: Iterable[int]) -> float:
        """The most these items can cost at the batch price (whole prompt, whole answer),
        priced as the ledger will book them — the backend's ``price=`` or the table's, each
        prompt at the tier its own size reaches."""
        most = self._gate.ledger.batch_most_cost
        name, discount = self._backend.name, self._backend.batch_discount
        return sum(
            most(name, r.prompt_tokens, r.max_tokens or _DEFAULT_MAX_TOKENS, discount)
            for r in (self._requests[i] for i in indices)
        )

    def release_holds(self) -> None:
        if self._spending is not None:
            for hold in self.holds:
                if hold is not None:
                    self._spending.release(hold)
        self.holds.clear()

    async def _book(self, outcomes: Mapping[int, ChatResult | GateError]) -> None:
        """Book the answers of every part no process booked yet (live retries book
        themselves), store them in the response cache and let go of the budget's holds: once
        per collected round, *before* a retry round asks the budget for room — the job's own
        hold of its first round's dearest outcome, held on until the end, left a retry round
        (or the live retries) waiting for room only the job itself could free: under
        ``throttle`` for ever, under ``raise`` refused, the answers collected lost with the
        hold. An item sent again counts as a call each time. The parts are marked booked in
        ``job.json`` when the job settles: a process that dies before takes its bookings
        along (its ledger), so the one that takes the job up books them again."""
        ledger, name = self._gate.ledger, self._backend.name
        source, settled = self._sources(), self._job.settled
        booked: set[int] = set()
        for index in range(len(self._requests)):
            part = source.get(index)
            done = (part.booked or part.name in self._booked_parts) if part is not None \
                else settled
            if index in self._live or done:
                continue
            outcome = outcomes.get(index)
            if isinstance(outcome, ChatResult):
                ledger.record_batch(name, outcome.billed_usage, self._backend.batch_discount)
            elif isinstance(outcome, GateError) and outcome.billed:  # an aborted answer's
                usage = billed_failure_usage(outcome, self._requests[index].prompt_tokens)
                ledger.record_batch(name, usage, self._backend.batch_discount)
            ledger.record_call(name, isinstance(outcome, ChatResult))
            booked.add(index)
        self._booked_parts |= {p.name for p in self._job.parts}
        self.release_holds()
        await self.cache.store(outcomes, skip=set(range(len(self._requests))) - booked)

    async def _settle(
        self, outcomes: dict[int, ChatResult | GateError]
    ) -> list[ChatResult | GateError]:
        """Book what is not booked yet (:meth:`_book`: a process that collects a job booked
        before books and stores nothing again — its answers would get a fresh TTL in the
        cache, over answers refreshed live since); the results in input order."""
        await self._book(outcomes)
        name = self._backend.name
        results: list[ChatResult | GateError] = [
            outcomes.get(index) or BackendError(
                "the batch ended without a result for this item", backend=name
            )
            for index in range(len(self._requests))
        ]
        if not self._job.settled or not all(p.booked for p in self._job.parts):
            for part in self._job.parts:
                part.booked = True
            self._job.settled = True
            self._save()
        return results


#: the running statuses, from furthest behind
_RUNNING = ("submitting", "validating", "in_progress", "finalizing")


def _behind(status: str) -> int:
    return _RUNNING.index(status) if status in _RUNNING else len(_RUNNING)


def _over_enqueued_limit(errors: str | None) -> bool:
    """OpenAI failed the batch at validation for its organisation's enqueued token limit
    (``token_limit_exceeded``): a queue that was full, not a request that is wrong."""
    text = (errors or "").lower()
    return "token_limit_exceeded" in text or "enqueued token limit" in text


def _item_error(line: ItemResult, backend: str) -> GateError:
    """A result-file error with no answer: expiry, cancellation, or the provider's reason."""
    code, message = line.error_code or "unknown", line.error_message or ""
    if code == "batch_expired":
        return RequestTimeout(
            "the batch expired (its 24 h window) before this item ran", backend=backend
        )
    if code == "batch_cancelled":
        return BatchCancelledError("the batch was cancelled before this item ran",
                                   backend=backend)
    return BackendError(f"batch item failed: [{code}] {message}".rstrip(), backend=backend)
