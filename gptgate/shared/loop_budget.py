"""A Redis operation's budget counts only the time the event loop was free to hear Redis.

A burst of calls (a ``gather`` of hundreds, a ``map``) keeps the loop running their first
steps for longer than the budget (50 ms by default): Redis has answered, but nobody has read
the answer. On the wall clock that looked like a slow Redis — an outage, local limits on top
of the fleet's permits, a rejoin — with Redis idle all along. When an operation's deadline
fires late (the loop was busy past it by more than half the budget), the operation is
:class:`LoopBusy`, not an outage: its outcome is unknown and the caller asks again. A loop that
stays that busy for ``BUSY_OUTAGE_S`` is treated as an outage after all (the fleet cannot be
heard in time either way).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import anyio

__all__ = ["BUSY_OUTAGE_S", "LoopBusy", "op_budget", "overrun"]

#: a deadline that fires later than this share of the budget means the loop was busy
LATE_SHARE = 0.5
#: lagged operations for this long, with none answered, are an outage after all
BUSY_OUTAGE_S = 2.0


class LoopBusy(TimeoutError):
    """The operation outlived its budget while the event loop was busy elsewhere: Redis may
    well have answered (and run it). Not Redis's fault; the outcome is unknown."""


@contextlib.contextmanager
def op_budget(budget_s: float) -> Iterator[None]:
    """``anyio.fail_after(budget_s)`` that tells a slow Redis (``TimeoutError``) from a busy
    event loop (:class:`LoopBusy`)."""
    with anyio.move_on_after(budget_s) as scope:
        yield
    if scope.cancelled_caught:
        raise overrun(scope.deadline, budget_s)


def overrun(deadline: float, budget_s: float) -> TimeoutError:
    """What a budget that ran out at ``deadline`` (anyio's clock) means: :class:`LoopBusy`
    when it fired that late, else a slow Redis (``TimeoutError``)."""
    late = anyio.current_time() - deadline
    if late > budget_s * LATE_SHARE:
        return LoopBusy(f"the event loop was busy {late * 1000:.0f} ms past the budget")
    return TimeoutError()
