"""How failed attempts reach the limit: one rule for calls, guards and the SDK client."""

from __future__ import annotations

import pytest

from gptgate.clock import SystemClock
from gptgate.errors import (
    BackendError,
    BadRequestError,
    GateError,
    RateLimitedError,
    RequestTimeout,
    StreamInterruptedError,
)
from gptgate.limits import Limiter
from gptgate.outcomes import report_failure, report_status
from tests.mockbackend import RecordingLimit


async def _outcome_of(report: object) -> tuple[str, bool] | None:
    """The (kind, congestion) the limit receives for one failed attempt (None: no sample)."""
    limit = RecordingLimit()
    limiter = Limiter(limit, clock=SystemClock())
    permit = await limiter.acquire()
    if isinstance(report, int):
        report_status(permit, report, 1.0)
    else:
        assert isinstance(report, GateError)
        report_failure(permit, report, 1.0)
    assert permit.done and limiter.in_flight == 0
    if not limit.samples:
        return None
    (sample,) = limit.samples
    return sample.kind, sample.congestion


@pytest.mark.parametrize(
    ("failure", "outcome"),
    [
        (RateLimitedError("slow down", status=429), ("dropped", True)),
        (RequestTimeout("too slow"), ("dropped", True)),
        (BackendError("overloaded", status=503), ("dropped", True)),
        (BackendError("boom", status=500), ("dropped", False)),
        (BackendError("bad gateway", status=502), ("dropped", False)),
        (StreamInterruptedError("cut"), ("dropped", False)),
        (BadRequestError("no such model", status=404), None),
        (BackendError("conflict", status=409), None),
        (429, ("dropped", True)),
        (408, ("dropped", True)),
        (529, ("dropped", True)),
        (500, ("dropped", False)),
        (504, ("dropped", False)),
        (400, None),
        (401, None),
    ],
)
async def test_each_failure_reaches_the_limit_as_its_kind(
    failure: GateError | int, outcome: tuple[str, bool] | None
) -> None:
    assert await _outcome_of(failure) == outcome
