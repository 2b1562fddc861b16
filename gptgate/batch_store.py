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

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import BadRequestError
from .results import ChatResult, Usage

__all__ = ["JobRecord", "JobStore", "PartRecord"]

_VERSION = 1
_FILE = "job.json"
#: answers of items sent again live, one JSON line each as it lands
_LIVE = "live.jsonl"


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
    #: wall-clock seconds just before the create was (first) sent: a batch API without
    #: metadata (Anthropic's) finds a create whose answer a crash lost among those after it
    created_after: float | None = None
    #: its answers were booked (ledger): a later round's are booked when it ends, its not again
    booked: bool = False

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
    #: the results were collected and booked (ledger, budget) once: a process that takes the
    #: job up again returns them without booking them twice
    settled: bool = False


def ranges_of(indices: list[int]) -> list[list[int]]:
    """Sorted indices as ``[start, stop)`` runs (a retry round of scattered failures)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return runs


class JobInUse(BadRequestError):
    """``job_dir`` is locked by another process (or task) sending this job right now."""


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
            # a record of a job settled before parts said so: every part of it was booked
            parts = [PartRecord(**{"booked": bool(obj.get("settled")), **p})
                     for p in obj["parts"]]
            return JobRecord(
                key=obj["key"], backend=obj["backend"], items=obj["items"],
                retry=obj.get("retry"), parts=parts, cancelled=bool(obj.get("cancelled")),
                settled=bool(obj.get("settled")),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadRequestError(
                f"{self.path} is not a gptgate batch job record ({exc})"
            ) from None

    def cancelled(self) -> bool:
        """The recorded job was cancelled — maybe by another process (``gptgate batch
        cancel`` beside a process still waiting on it), whose record this one's must not
        overwrite."""
        try:
            record = self.load()
        except BadRequestError:
            return False
        return record is not None and record.cancelled

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold ``job_dir`` while sending (uploads, creates, live retries): a second process
        on the same job — an old pod still alive beside its replacement — would otherwise
        look, find nothing, and create the batch twice. It is refused instead. The lock is
        the kernel's (``flock``): a process that dies, even SIGKILLed, releases it."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock, as before
            yield
            return
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            handle = open(self.dir / ".lock", "a+b")  # noqa: SIM115 - closed below
        except OSError as exc:  # a file, under a file, not creatable: before anything is sent
            raise BadRequestError(
                f"job_dir {os.fspath(self.dir)!r} cannot be used: {exc.strerror or exc}"
            ) from None
        with handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JobInUse(
                    f"{self.dir} is in use: another process (or task) is sending this job "
                    "right now; wait for it, or take the job up once it has stopped"
                ) from None
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

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


    def append_live(self, index: int, result: ChatResult) -> None:
        """Keep one live retry's answer (paid for at the live price) before anything else
        happens: a process that resumes the job returns it instead of paying for it again."""
        self.keep_answers({index: result})

    def keep_answers(self, answers: Mapping[int, ChatResult]) -> None:
        """Keep answers got without the batch (live, or from the response cache), with one
        fsync for them all."""
        if not answers:
            return
        lines = "".join(
            json.dumps({"index": index, "result": dataclasses.asdict(result)}) + "\n"
            for index, result in answers.items()
        )
        path = self.dir / _LIVE
        if _cut_short(path):  # a crash cut the last line: the next one starts on its own
            lines = "\n" + lines
        with open(path, "a", encoding="utf-8") as out:
            out.write(lines)
            out.flush()
            os.fsync(out.fileno())

    def forget_answers(self) -> None:
        """Drop answers kept for a job whose intent was never recorded (refused by the budget,
        a bad item, an interruption, between keeping them and recording it). Nothing was sent
        for it, so nothing paid for is lost; left there, they would be read as the answers of
        whichever job is recorded here next, to its items of the same index."""
        (self.dir / _LIVE).unlink(missing_ok=True)

    def load_live(self) -> dict[int, ChatResult]:
        """The live answers kept so far (a line cut short by a crash is skipped)."""
        found: dict[int, ChatResult] = {}
        try:
            raw = (self.dir / _LIVE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return found
        for text in raw.splitlines():
            try:
                obj = json.loads(text)
                fields = obj["result"]
                fields["usage"] = Usage(**fields["usage"])
                fields["billed_usage"] = Usage(**fields["billed_usage"])
                found[int(obj["index"])] = ChatResult(**fields)
            except (ValueError, KeyError, TypeError):
                continue
        return found


def _cut_short(path: Path) -> bool:
    """The file's last line has no newline (a write a crash cut short)."""
    try:
        with open(path, "rb") as data:
            data.seek(-1, os.SEEK_END)
            return data.read(1) != b"\n"
    except OSError:  # absent, or empty
        return False


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
