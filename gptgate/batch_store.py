"""The durable record of a batch job in its ``job_dir``: what was meant, then what was done.

A job that runs for hours outlives processes. Before anything is uploaded, ``job.json``
records the *intent* (the job's key, a hash of every request, and how it is split into
parts); each provider id (input file, batch) is recorded as soon as it is known. Every write
is atomic (a temporary file, fsync, rename, fsync of the directory): a crash leaves the old
record or the new one, never half of one. A process started again with the same items reads
the record and resumes; ids it never got to record are looked up at the provider by the job's
key (gptgate/batch.py), never guessed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import BadRequestError

__all__ = ["JobRecord", "JobStore", "PartRecord"]

_VERSION = 1
_FILE = "job.json"


@dataclass(slots=True)
class PartRecord:
    """One provider batch of the job: which items (``ranges`` of input indices, ends
    excluded), in which round (0: the job; 1: its failed items sent again)."""

    name: str
    ranges: list[list[int]]
    round: int = 0
    file_id: str | None = None
    batch_id: str | None = None
    #: the last polled status, and the result files once it ended
    status: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: str | None = None

    def indices(self) -> list[int]:
        return [i for start, stop in self.ranges for i in range(start, stop)]


@dataclass(slots=True)
class JobRecord:
    key: str
    backend: str
    items: int
    retry: str | None
    parts: list[PartRecord] = field(default_factory=list)
    cancelled: bool = False
    #: anything a caller (the CLI) keeps with the job: its config path, the items file
    extra: dict[str, Any] = field(default_factory=dict)


def ranges_of(indices: list[int]) -> list[list[int]]:
    """Sorted indices as ``[start, stop)`` runs (a retry round of scattered failures)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return runs


class JobStore:
    """``job.json`` in ``job_dir``, read and replaced atomically."""

    def __init__(self, job_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(job_dir)
        self.path = self.dir / _FILE

    def load(self) -> JobRecord | None:
        """The recorded job, or None for an empty (or new) ``job_dir``."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BadRequestError(f"cannot read {self.path}: {exc.strerror}") from None
        try:
            obj = json.loads(raw)
            if obj.get("version") != _VERSION:
                raise ValueError(f"version {obj.get('version')!r}")
            parts = [PartRecord(**p) for p in obj["parts"]]
            return JobRecord(
                key=obj["key"], backend=obj["backend"], items=obj["items"],
                retry=obj.get("retry"), parts=parts, cancelled=bool(obj.get("cancelled")),
                extra=dict(obj.get("extra") or {}),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadRequestError(
                f"{self.path} is not a gptgate batch job record ({exc})"
            ) from None

    def save(self, record: JobRecord) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"version": _VERSION, **asdict(record)}, indent=1).encode()
        temp = self.dir / f".{_FILE}.{os.getpid()}.tmp"
        with open(temp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self.path)
        _fsync_dir(self.dir)


def _fsync_dir(path: Path) -> None:
    """Make the rename itself durable (POSIX: the directory entry lives in the directory)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
