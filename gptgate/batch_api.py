"""The seam between a batch job and one provider's Batch API (``BatchAPI``).

A job (gptgate/batch.py) knows nothing of URLs or file formats: it asks its ``BatchAPI`` to
write request lines, upload a file, create, look up, poll, cancel and download batches, and to
read the result lines back as :class:`ItemResult`. OpenAI's Files + Batches API (Azure's too)
is gptgate/batch_openai.py; Anthropic's Message Batches gptgate/batch_anthropic.py;
gptgate/batch_apis.py picks one by the backend's dialect.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["TERMINAL", "BatchAPI", "BatchLimits", "CreateIntent", "ItemResult", "RemoteBatch"]

#: a batch in one of these states will not change again
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled", "ended"})


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What one provider batch may hold: a job larger than this is split into parts."""

    max_requests: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class CreateIntent:
    """What a part's create was, for an API whose batches carry no metadata (Anthropic's) to
    find one created before a crash lost its id: how many requests, not before when (wall
    clock, recorded in ``job_dir`` before the create was sent), and the ids other parts of
    the job already hold (never this part's)."""

    requests: int
    not_before: float | None
    taken: frozenset[str]


@dataclass(frozen=True, slots=True)
class RemoteBatch:
    """One provider batch as last polled."""

    id: str
    status: str
    total: int
    completed: int
    failed: int
    output_file_id: str | None = None
    error_file_id: str | None = None
    #: why the whole batch failed (a validation error), when it did
    errors: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class ItemResult:
    """One line of a result file: the answer (``status`` and ``body``, a chat completion or an
    error body), or a provider error with no answer (``error_code``: ``batch_expired``, …)."""

    custom_id: str
    status: int | None
    body: Any
    error_code: str | None = None
    error_message: str | None = None


class BatchAPI(Protocol):
    """One provider's Batch API, over the backend's pooled client."""

    limits: BatchLimits
    #: bytes a batch holds beyond its request lines and a newline after each (what the split
    #: counts against ``limits.max_bytes``): 0 for a JSONL file; Anthropic's inline
    #: ``{"requests":[...]}`` body, commas between the lines, 14
    envelope_bytes: int
    #: True: the requests go up as a file (``upload``), then ``create`` names it; False: the
    #: requests go inline in ``create``'s ``data`` (Anthropic's Message Batches)
    uploads: bool

    def request_line(self, custom_id: str, body: bytes) -> bytes:
        """One JSONL line (no newline) asking for the chat completion ``body``."""
        ...

    async def find_file(self, filename: str) -> str | None:
        """The id of an uploaded input file called ``filename`` (a crash after its upload)."""
        ...

    async def upload(self, filename: str, data: bytes) -> str:
        ...

    async def find_batch(self, metadata: Mapping[str, str], intent: CreateIntent) -> str | None:
        """The id of a batch created with ``metadata`` (a crash after its creation); an API
        without metadata matches ``intent`` instead."""
        ...

    async def create(self, file_id: str, metadata: Mapping[str, str], data: bytes) -> str:
        """Create the batch of the uploaded ``file_id``, or (``uploads`` False) of the request
        lines ``data``."""
        ...

    async def retrieve(self, batch_id: str) -> RemoteBatch:
        ...

    async def cancel(self, batch_id: str) -> None:
        ...

    async def results(self, batch: RemoteBatch) -> Iterator[ItemResult]:
        """Every result line of a finished batch (output and error files), in file order."""
        ...
