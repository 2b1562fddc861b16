"""Two processes on one batch job: what one recorded, the other takes in, never writes over.

A job's record is rewritten whole by whichever process saves it (a status polled, a part
created). Two processes waiting on one ``job_dir`` — an old pod beside its replacement, a
``gptgate batch collect`` beside the script that submitted — each held the record as it
read it: the second to reach the retry round created it *again* (the first had, and the
second, not having taken the job up, did not look for it at the provider), paying twice for
the retried items, and either one's next save dropped the other's part from ``job.json``.
So before each save, and before deciding on a retry round, a process takes in the parts
the record on disk holds that its own does not (and ids it lacks), and the cancel."""

from __future__ import annotations

from .batch_store import JobRecord, PartRecord

__all__ = ["adopt"]

#: what another process learned about a part this one knows by name
_LEARNED = ("file_id", "batch_id", "created_after", "status", "output_file_id",
            "error_file_id", "errors")


def adopt(mine: JobRecord, disk: JobRecord | None) -> list[PartRecord]:
    """Take into ``mine`` what ``disk`` (the same job as recorded now) holds and it lacks: a
    part it does not know (a retry round created elsewhere), a part's ids it never saw
    (created elsewhere), the cancel. Returns the parts taken in whole."""
    if disk is None or disk.key != mine.key:
        return []
    mine.cancelled = mine.cancelled or disk.cancelled
    known = {part.name: part for part in mine.parts}
    taken: list[PartRecord] = []
    for part in disk.parts:
        own = known.get(part.name)
        if own is None:
            mine.parts.append(part)
            taken.append(part)
        elif own.batch_id is None and part.batch_id is not None:
            for name in _LEARNED:
                setattr(own, name, getattr(part, name))
    return taken
