"""The chaos run's ledger compared with the servers' bills call by call, not only in total.

A total that misses the bill by 5% once in 16 runs names nothing; the same comparison per call
names the verb and the calls whose billed work the ledger did not see. Each caller runs with
its index and verb in a context variable; every attempt the gateway's ledger books is counted
for the caller whose context booked it (``?`` when none did: a gateway task's own booking).
The servers' side is :class:`~gptgate.sim.ledger.RequestBill` (each admitted request's bill,
told apart by its last user message, which holds the caller's index).
"""

from __future__ import annotations

import collections
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from gptgate.ledger import Ledger
from gptgate.results import Usage
from gptgate.sim.ledger import RequestBill

__all__ = ["CallBooks"]

#: the caller index in a chaos prompt's last user message (``question {i}``)
_INDEX = re.compile(r"question (\d+)")


@dataclass(slots=True)
class _Side:
    """One call's tokens on one backend, from one side (the ledger's or the server's)."""

    tokens: int = 0
    uncertain: int = 0
    count: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)


class CallBooks:
    """Per backend and caller: what the ledger booked and what the server billed."""

    def __init__(self) -> None:
        self._caller: ContextVar[tuple[int, str] | None] = ContextVar("chaos_caller", default=None)
        self.kinds: dict[int, str] = {}
        self.endings: dict[int, str] = {}
        self.booked: dict[tuple[str, int | None], _Side] = collections.defaultdict(_Side)
        self.billed: dict[tuple[str, int | None], _Side] = collections.defaultdict(_Side)

    @contextmanager
    def caller(self, index: int, kind: str) -> Iterator[None]:
        """Attempts booked in this block (and the tasks it starts) are ``index``'s."""
        self.kinds[index] = kind
        token = self._caller.set((index, kind))
        try:
            yield
        finally:
            self._caller.reset(token)

    def watch(self, ledger: Ledger) -> None:
        """Count every attempt ``ledger`` books (and every correction) for its caller."""
        record, correct = ledger.record_attempt, ledger.correct

        def record_attempt(backend: str, usage: Usage, **kwargs: Any) -> float:
            side, resent = self._side(backend)
            side.count += 1
            side.tokens += usage.total_tokens
            if kwargs.get("uncertain"):
                side.uncertain += usage.total_tokens
            else:
                side.uncertain += kwargs.get("unread_tokens", 0)
            side.outcomes[_how(kwargs) + ("+resent" if resent else "")] += 1
            return record(backend, usage, **kwargs)

        def corrected(backend: str, booked: Usage, actual: Usage, *, uncertain: bool) -> float:
            side, _ = self._side(backend)
            side.tokens += actual.total_tokens - booked.total_tokens
            if uncertain:
                side.uncertain -= booked.total_tokens
            side.outcomes["corrected"] += 1
            return correct(backend, booked, actual, uncertain=uncertain)

        ledger.record_attempt = record_attempt  # type: ignore[method-assign]
        ledger.correct = corrected  # type: ignore[method-assign]

    def bill(self, backend: str, bills: Iterable[RequestBill]) -> None:
        """The server's own bills for ``backend``'s requests."""
        for bill in bills:
            match = _INDEX.search(bill.prompt)
            side = self.billed[backend, int(match.group(1)) if match else None]
            side.count += 1
            side.tokens += bill.input_tokens + bill.output_tokens
            side.outcomes[bill.outcome] += 1

    def _side(self, backend: str) -> tuple[_Side, bool]:
        index, resent = _request_index(3)
        if index is None:
            caller = self._caller.get()
            index = None if caller is None else caller[0]
        return self.booked[backend, index], resent

    def ended(self, index: int, outcome: str) -> None:
        """How ``index``'s call ended, as its caller saw it."""
        self.endings[index] = outcome

    def table(self, backend: str, worst: int = 6) -> str:
        """Per verb: booked (of it uncertain) vs billed tokens, and the billed work no
        booking covers (the sum over calls of bill − booked where positive); then the calls
        missing the most."""
        rows: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0, 0])
        short: list[tuple[int, int | None]] = []
        for index in {i for b, i in (*self.booked, *self.billed) if b == backend}:
            ours, theirs = self.booked.get((backend, index)), self.billed.get((backend, index))
            booked = ours.tokens if ours else 0
            billed = theirs.tokens if theirs else 0
            kind = "?" if index is None else self.kinds.get(index, "?")
            row = rows[kind]
            row[0] += booked
            row[1] += ours.uncertain if ours else 0
            row[2] += billed
            row[3] += max(0, billed - booked)
            row[4] += max(0, booked - billed)
            short.append((billed - booked, index))
        lines = [f"{backend}: verb booked (uncertain) / billed, unbooked, overbooked"]
        lines += [
            f"  {kind}: {r[0]:,} ({r[1]:,}) / {r[2]:,}, unbooked {r[3]:,}, over {r[4]:,}"
            for kind, r in sorted(rows.items())
        ]
        for gap, index in sorted(short, key=lambda s: s[0], reverse=True)[:worst]:
            ours, theirs = self.booked.get((backend, index)), self.billed.get((backend, index))
            lines.append(
                f"  call {index} ({self.kinds.get(index, '?') if index is not None else '?'} "
                f"{self.endings.get(index, '?') if index is not None else ''}): "
                f"unbooked {gap:,}; booked {_show(ours)}; billed {_show(theirs)}"
            )
        return "\n".join(lines)


def _request_index(depth: int) -> tuple[int | None, bool]:
    """The caller index in the prompt of the attempt that is booking (an SDK request's body,
    gptgate/sdk_client.py ``_Attempt.request``; a call's ``spec.messages`` in calls.py), up
    the stack: a stream dropped by its caller is booked from whichever task noticed it, and
    ``map``/``submit`` attempts run in tasks of the gateway's own. And whether it is a
    refused SDK request sent again by the transport (gptgate/sdk_requeue.py)."""
    frame: FrameType | None = sys._getframe(depth)
    for _ in range(3):
        if frame is None:
            return None, False
        local = frame.f_locals
        content = getattr(getattr(local.get("self"), "request", None), "content", None)
        messages = getattr(local.get("spec"), "messages", None)
        text = (
            content.decode("utf-8", "replace") if isinstance(content, bytes)
            else None if messages is None else repr(messages[-1:])
        )
        if text is not None:
            match = _INDEX.search(text)
            resent = getattr(local.get("self"), "cut_at", None) is not None
            return (int(match.group(1)) if match else None), resent
        frame = frame.f_back
    return None, False


def _how(kwargs: dict[str, Any]) -> str:
    flags = [name for name in ("wasted", "interrupted", "uncertain") if kwargs.get(name)]
    if kwargs.get("unread_tokens"):
        flags.append("unread")
    return "+".join(flags) or "ok"


def _show(side: _Side | None) -> str:
    if side is None:
        return "nothing"
    return f"{side.tokens:,} in {side.count} ({dict(side.outcomes)})"
