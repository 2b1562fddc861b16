"""``sync_gate.batch(...)``: a Batch API job from sync code (a Celery task, a nightly script).

The job itself is :class:`~gptgate.BatchJob` on the SyncGateway's loop (gptgate/batch.py: the
same durability in ``job_dir``, the same batch price in the ledger); this is its blocking face.
``wait()``, ``refresh()`` and ``cancel()`` run the job's coroutines on that loop; ``id``,
``status``, ``counts`` and ``batch_ids`` are read there too, so a thread watching a job
another thread waits for sees a consistent state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import anyio

from .batch import BatchCounts, BatchJob
from .errors import GateError
from .results import ChatResult
from .sync_portal import LoopPortal, call_on, run_on

__all__ = ["SyncBatchJob"]

T = TypeVar("T")


class SyncBatchJob:
    """One offline job at a provider's Batch API, driven from plain threads (from
    ``sync_gate.batch(...)``). Interrupting a thread blocked in ``wait()`` stops its waiting,
    not the job: the provider runs on, and the same items later resume it."""

    def __init__(self, loop: LoopPortal, job: BatchJob) -> None:
        self._loop = loop
        self._job = job
        #: one waiter at a time collects (made on the loop, at the first wait)
        self._waiting: anyio.Lock | None = None

    def _read(self, read: Callable[[BatchJob], T]) -> T:
        return call_on(self._loop, functools.partial(read, self._job))

    @property
    def job(self) -> BatchJob:
        """The async job, for code on the gateway's loop."""
        return self._job

    @property
    def id(self) -> str:
        """The job's own id: the same in every process that resumes it."""
        return self._job.id

    @property
    def job_dir(self) -> str:
        return self._job.job_dir

    @property
    def resumed(self) -> bool:
        """This process found the job recorded in ``job_dir`` and took it up."""
        return self._job.resumed

    @property
    def status(self) -> str:
        """As :attr:`BatchJob.status` (``validating`` … ``completed``, ``cancelled``, …)."""
        return self._read(lambda job: job.status)

    @property
    def counts(self) -> BatchCounts:
        """Total, answered and failed items (:attr:`BatchJob.counts`)."""
        return self._read(lambda job: job.counts)

    @property
    def batch_ids(self) -> list[str]:
        """The provider's batch ids, one per part (and retry round)."""
        return self._read(lambda job: job.batch_ids)

    def refresh(self) -> str:
        """Poll every part still running once; the job's status."""
        return run_on(self._loop, self._job.refresh)

    def cancel(self) -> None:
        """Cancel every part still running (:meth:`BatchJob.cancel`)."""
        run_on(self._loop, self._job.cancel)

    def wait(self) -> list[ChatResult | GateError]:
        """Block until every part ended; the results in input order, each a ``ChatResult``
        or its typed error (:meth:`BatchJob.wait`)."""
        return run_on(self._loop, self._wait)

    async def _wait(self) -> list[ChatResult | GateError]:
        """Threads waiting at once share one collection: the first collects and books the
        cost, the others then get its results (``BatchJob.wait`` keeps them)."""
        if self._waiting is None:
            self._waiting = anyio.Lock()
        async with self._waiting:
            return await self._job.wait()

    def __repr__(self) -> str:
        return f"Sync{self._job!r}"

