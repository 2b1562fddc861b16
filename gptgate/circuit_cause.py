"""Why a backend's circuit is open, said in the error every call gets while it is.

Once a circuit opens, calls fail (or wait) without being sent, so no new failure says what
is wrong: with every backend down, 200 of 200 concurrent calls read only "every eligible
backend's circuit is open", status None, and the cause — a refused connection, a proxy's
502 page, a body that is not JSON — was in the first handful of errors, long scrolled away.
Each breaker keeps the failure that counted last (its message is already cleared of
secrets: ``GateError`` scrubs it), and the open-circuit error names it per backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import CircuitOpenError, GateError, OutOfFundsError
from .routing import BackendState, CircuitBreaker

__all__ = ["FailureCause", "last_failure", "open_circuit_error", "remember_failure"]

#: a cause is one line of an error, not a whole HTML page
MAX_CAUSE_CHARS = 200
#: backends named in one error (the soonest to reopen first)
MAX_NAMED = 4


@dataclass(frozen=True, slots=True)
class FailureCause:
    """The last failure a breaker counted: its (scrubbed) message and HTTP status."""

    message: str
    status: int | None
    #: the account behind the key is empty (``OutOfFundsError``, whatever its status)
    funds: bool = False
    #: a failure of the same run (no success between) was a refused key
    key_in_run: bool = False

    @property
    def refused_key(self) -> bool:
        """A refused key (only the credential paths count a 401/403: credential_failover.py,
        credential_owner.py) in the run of failures that ends here: the key's failure, not
        the server's — an open it is part of stays in its process under ``shared=``, even
        when the last failure was a server's (a revoked pod's SDK streams cut as its new
        requests are refused). An empty account is not one, even said with a 403: every
        process draws on it, so its open is the fleet's (shared/health.py)."""
        return self.key_in_run or (self.status in (401, 403) and not self.funds)


def remember_failure(breaker: CircuitBreaker, error: GateError) -> None:
    """Keep ``error`` as the breaker's latest cause (called as it is counted, before
    ``on_failure``), with whether its run of failures included a refused key."""
    message = " ".join(error.message.split())
    if len(message) > MAX_CAUSE_CHARS:
        message = message[: MAX_CAUSE_CHARS - 1] + "…"
    previous = breaker.cause  # the same run: failures since a success, none the fleet's
    in_run = previous is not None and breaker.failures > 0 and not breaker.forced
    breaker.cause = FailureCause(
        message, error.status, isinstance(error, OutOfFundsError),
        key_in_run=in_run and previous is not None and previous.refused_key,
    )


def last_failure(state: BackendState) -> str:
    """What the backend's circuit last counted, one line (its cause, or that there is none)."""
    cause = state.breaker.cause
    if state.breaker.forced:
        return f"{state.name}: another process of the fleet found it down"
    if cause is None:
        return f"{state.name}: no failure seen"
    status = f" [{cause.status}]" if cause.status is not None else ""
    return f"{state.name} last failed{status}: {cause.message}"


def open_circuit_error(
    soonest: BackendState, candidates: Sequence[BackendState], wait: float
) -> CircuitOpenError:
    """The fail-fast error when every eligible circuit is open: each backend with its last
    failure (``soonest``, the first to reopen, first). ``status`` stays None — nothing was
    sent, and code reading a status (a 503's pause, a tier's failover) must not take an
    old answer for this call's — the last status is in the message."""
    ordered = [soonest, *(s for s in candidates if s is not soonest)][:MAX_NAMED]
    return CircuitOpenError(
        "every eligible backend's circuit is open; " + "; ".join(last_failure(s) for s in ordered),
        backend=soonest.name,
        retry_after=wait,
        should_retry=False,
    )
