"""Warm start: what ``gate.snapshot()`` saves and ``Gateway(state=...)`` starts from.

A gateway that ran an hour ago knew where its backend's knee was; slow start from 4 relearns
it at the cost of several latencies (tpu, knee ~110: ~5 latencies). A snapshot is a small
JSON document, one entry per backend:

``{"version": 1, "taken_at": <time.time()>, "backends": {name: {"model", "base_url",
"limit": {...} | null, "hit_rates": {prefix key: rate}[, "taken_at"]}}}``

An entry kept from an earlier run for a backend the writing gateway does not have carries its
own ``taken_at`` (gptgate/state_file.py merges per backend), so a rewrite never makes it look
fresh; an entry without one is as old as the document.

``limit`` is :meth:`gptgate.limits.LLMLimit.export_state` (the limit, the knee estimate, the
latency baseline and what sizes its windows) plus ``baseline_s``, the baseline in seconds for a
human reader; it is ``null`` for a fixed limit or one still in slow start. A state is never a
reason to fail a start: a file that is not valid state (truncated, hand-edited, another
version), one older than ``state_max_age_s``, or an entry from another model or base_url is
ignored with one log line (logger ``"gptgate"``), and that backend starts cold.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .config import Backend
from .errors import BadRequestError

__all__ = [
    "SNAPSHOT_VERSION",
    "BackendSnapshot",
    "GatewaySnapshot",
    "LimitState",
    "StateSource",
    "check_state_arg",
    "load_state",
    "merge_state",
    "parse_state",
    "save_state",
    "warm_limits",
]

log = logging.getLogger("gptgate")

SNAPSHOT_VERSION = 1
#: a snapshot taken this far in the future was not taken by this machine's clock
_CLOCK_SKEW_S = 300.0
#: prefix hit rates kept per backend (the hottest by sample count): the file stays small
MAX_HIT_RATES = 100

StateSource = str | os.PathLike[str] | Mapping[str, Any]

_STRICT = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class LimitState(BaseModel):
    """An adaptive limit's learned state (``LLMLimit.export_state`` + ``baseline_s``)."""

    model_config = _STRICT

    limit: int = Field(ge=1)
    #: the operating point the limit probes around
    knee: float = Field(ge=1.0)
    #: latency baseline ``R(K) = a + K·b`` of a reference call of ``K`` output tokens
    baseline_a: float
    baseline_b: float = Field(ge=0.0)
    reference_tokens: float = Field(ge=1.0)
    overhead_tokens: float = Field(ge=0.0)
    baseline_s: float = Field(gt=0.0)
    log_var: float = Field(ge=0.0)
    rtt_s: float = Field(ge=0.0)
    latency_s: float = Field(ge=0.0)
    r_mean_s: float = Field(ge=0.0)


class BackendSnapshot(BaseModel):
    model_config = _STRICT

    model: str
    base_url: str
    limit: LimitState | None = None
    #: prefix key → lifetime cached / cacheable input of that prefix group
    hit_rates: dict[str, float] = Field(default_factory=dict)
    #: when this entry was learned, if earlier than the document's ``taken_at`` (an entry
    #: kept for a backend the last writer did not have); None: as old as the document
    taken_at: float | None = None


class GatewaySnapshot(BaseModel):
    model_config = _STRICT

    version: Literal[1]
    #: wall clock (``time.time()``) when taken: staleness is judged across processes
    taken_at: float
    backends: dict[str, BackendSnapshot]

    def document(self) -> dict[str, Any]:
        """As JSON-able data; an entry's ``taken_at`` only where it differs from the document's."""
        data = self.model_dump(mode="json")
        for entry in data["backends"].values():
            if entry["taken_at"] is None:
                del entry["taken_at"]
        return data

    def entry_age_s(self, name: str, now: float) -> float:
        """Seconds since backend ``name``'s entry was learned."""
        taken_at = self.backends[name].taken_at
        return now - (self.taken_at if taken_at is None else taken_at)


def limit_state(exported: Mapping[str, float] | None) -> LimitState | None:
    """A limit's ``export_state()`` as a validated :class:`LimitState` (None stays None)."""
    if exported is None:
        return None
    baseline = exported["baseline_a"] + exported["reference_tokens"] * exported["baseline_b"]
    values = {**exported, "limit": round(exported["limit"]), "baseline_s": baseline}
    try:
        return LimitState.model_validate(values)
    except ValidationError:
        return None  # nothing sensible learned yet (e.g. a degenerate baseline)


def check_state_arg(state: object) -> StateSource | None:
    """``state=`` is a path (str / PathLike) or a dict; anything else fails at construction."""
    if state is None or isinstance(state, (str, os.PathLike, Mapping)):
        return state
    raise BadRequestError(
        f"state must be a path (str or os.PathLike) or a dict from gate.snapshot(), "
        f"got {type(state).__name__}"
    )


def _read(source: StateSource) -> object | None:
    """The raw document, or None (logged) when there is none to read."""
    if isinstance(source, Mapping):
        return source
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None  # the first run: starts cold, and the file is written on exit
    except (OSError, UnicodeDecodeError) as error:
        log.warning("state %s ignored, starting cold: cannot read it (%s)", path, error)
        return None
    try:
        document: object = json.loads(text)
    except ValueError as error:
        log.warning("state %s ignored, starting cold: not JSON (%s)", path, error)
        return None
    return document


def parse_state(raw: object) -> GatewaySnapshot | str:
    """``raw`` as a snapshot, or why it is not one (``"version: Field required"``)."""
    try:
        return GatewaySnapshot.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        at = ".".join(str(part) for part in first["loc"]) or "document"
        return f"not valid state ({at}: {first['msg']})"


def load_state(
    source: StateSource,
    backends: Sequence[Backend],
    *,
    max_age_s: float,
    now: float | None = None,
) -> dict[str, LimitState]:
    """The saved limit state of each configured backend that may start warm from it.

    Everything else is ignored with one log line each: an invalid document, a stale one, an
    entry for another model or base_url. Never raises for the document's content."""
    raw = _read(source)
    if raw is None:
        return {}
    where = "state" if isinstance(source, Mapping) else f"state {os.fspath(source)}"
    snapshot = parse_state(raw)
    if isinstance(snapshot, str):
        log.warning("%s ignored, starting cold: %s", where, snapshot)
        return {}
    return warm_limits(snapshot, backends, where=where, max_age_s=max_age_s, now=now)


def _fresh(age: float, max_age_s: float) -> bool:
    return math.isfinite(age) and -_CLOCK_SKEW_S <= age <= max_age_s


def warm_limits(
    snapshot: GatewaySnapshot,
    backends: Sequence[Backend],
    *,
    where: str,
    max_age_s: float,
    now: float | None = None,
) -> dict[str, LimitState]:
    """Of a valid snapshot, the entries the configured backends may start warm from: each
    judged by its own age, model and base_url (one log line for the stale ones, one per
    foreign entry)."""
    wall = time.time() if now is None else now
    warm: dict[str, LimitState] = {}
    stale: list[tuple[str, float]] = []
    for backend in backends:
        entry = snapshot.backends.get(backend.name)
        if entry is None or entry.limit is None:
            continue
        age = snapshot.entry_age_s(backend.name, wall)
        if not _fresh(age, max_age_s):
            stale.append((backend.name, age))
            continue
        if entry.model != backend.model or entry.base_url != backend.base_url:
            log.warning(
                "%s for backend %r ignored, starting cold: saved for model %r at %s, "
                "configured %r at %s",
                where,
                backend.name,
                entry.model,
                entry.base_url,
                backend.model,
                backend.base_url,
            )
            continue
        warm[backend.name] = entry.limit
    if stale:
        log.warning(
            "%s for %s ignored, starting cold: taken %s s ago (state_max_age_s=%g)",
            where,
            ", ".join(repr(name) for name, _ in stale),
            ", ".join(f"{age:.0f}" for _, age in stale),
            max_age_s,
        )
    return warm


def merge_state(
    own: Mapping[str, Any], saved: GatewaySnapshot | None, *, max_age_s: float, now: float
) -> dict[str, Any]:
    """``own`` (this gateway's snapshot) over ``saved`` (what the file holds now): the entries
    of backends this gateway does not have are kept with their own ``taken_at``, unless older
    than ``max_age_s`` (they would start nothing warm)."""
    merged = {**own, "backends": dict(own["backends"])}
    if saved is None:
        return merged
    for name in saved.backends.keys() - merged["backends"].keys():
        age = saved.entry_age_s(name, now)
        if _fresh(age, max_age_s):
            entry = saved.backends[name].model_copy(update={"taken_at": now - age})
            merged["backends"][name] = entry.model_dump(mode="json")
    return merged


def save_state(
    path: str | os.PathLike[str], snapshot: Mapping[str, Any], *, sort_keys: bool = True
) -> None:
    """Write ``snapshot`` as JSON, atomically: a temporary file in the same directory, then
    ``os.replace`` — a crash mid-write leaves the old file whole, never a truncated one."""
    target = Path(path)
    text = json.dumps(snapshot, indent=1, sort_keys=sort_keys, allow_nan=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
