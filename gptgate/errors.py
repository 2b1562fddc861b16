"""The typed errors every accepted call can end in.

Each carries what an operator needs at 3 a.m. — backend, HTTP status, request id, retry-after —
and never the API key or prompt text: messages are built from server error *messages* only,
and every message is cleared of the exact secrets the gateway sends (``gptgate.scrub``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .scrub import scrub_known

if TYPE_CHECKING:
    from .results import Usage

__all__ = [
    "BackendError",
    "BadRequestError",
    "BatchCancelledError",
    "BatchItemsError",
    "BudgetExceededError",
    "CircuitOpenError",
    "GateError",
    "GatewayClosedError",
    "InvalidConfigError",
    "MisaddressedRequestError",
    "NoBackendError",
    "OutOfFundsError",
    "OverloadedError",
    "RateLimitedError",
    "RequestTimeout",
    "RequestTooLargeError",
    "SharedUnreachableError",
    "StreamInterruptedError",
]


class GateError(Exception):
    """Base of every gptgate error.

    ``retryable`` says whether trying again (here or elsewhere) can help; the retry policy reads
    it, so a subclass decides once what a failure means instead of every call site guessing.
    """

    retryable: bool = False
    #: output tokens the server probably generated for this attempt (counted, with the
    #: prompt, as possibly billed when ``billed`` is True)
    output_tokens: int = 0
    #: the call moved past this backend to another that may serve it (a prompt too long for
    #: its window, its own key refused): routing, not a retry of the same request, so it is
    #: outside ``max_attempts`` as it is outside the retry budget (context_failover.py)
    moved: bool = False
    #: the server's own count of a failed attempt's usage, when it gave one (a cut stream's
    #: so far, an aborted answer's: gptgate/wire/aborted.py); the ledger books by it
    usage_so_far: Usage | None = None

    def __init__(
        self,
        message: str,
        *,
        backend: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        should_retry: bool | None = None,
        billed: bool = False,
        unsent: bool = False,
    ) -> None:
        message = scrub_known(message)  # whoever built it: a server may echo the key it got
        super().__init__(message)
        self.message = message
        self.backend = backend
        self.status = status
        self.request_id = request_id
        self.retry_after = retry_after
        #: the server's ``x-should-retry`` verdict, which beats our own classification
        self.should_retry = should_retry
        #: True when the backend may have billed work for this attempt (e.g. a timeout after
        #: the prompt was sent): the ledger counts it even though no result came back.
        self.billed = billed
        #: True when the request never left this client (connection refused, connect
        #: timeout, no pooled connection): the backend did no work, so moving the call to
        #: another backend is no retry storm (the retry budget does not pay for it)
        self.unsent = unsent
        if should_retry is not None:
            self.retryable = should_retry

    def __str__(self) -> str:
        parts = [self.message]
        detail = [
            f"{name}={value}"
            for name, value in (
                ("backend", self.backend),
                ("status", self.status),
                ("request_id", self.request_id),
                ("retry_after", self.retry_after),
            )
            if value is not None
        ]
        if detail:
            parts.append(f"({', '.join(detail)})")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its class, message and fields — not rebuilt by calling the class with
        the message alone, as exceptions are: ``SharedUnreachableError(url=...)`` could not
        be, and a multiprocessing pool whose worker raised one waited for it forever."""
        return (_rebuilt, (type(self), self.args), self.__dict__)


def _rebuilt(cls: type[GateError], args: tuple[Any, ...]) -> GateError:
    """An unpickled error: its fields come back from its pickled ``__dict__``."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    return error


class RateLimitedError(GateError):
    """HTTP 429, or a rate-limit error event: the backend asks us to slow down."""

    retryable = True


class BackendError(GateError):
    """5xx, a broken connection or a malformed response: the backend failed, not the call."""

    retryable = True


class CircuitOpenError(BackendError):
    """Refused unsent: every eligible backend's circuit is open (after recent failures) and
    would not be probed again within ``max_breaker_wait_s`` and the call's deadline. A
    ``BackendError``, so code that catches those catches it; its own ``error.type`` on spans
    and metrics tells "gptgate did not send" from "the backend failed". ``status`` is None
    (nothing was sent), ``retry_after`` when the first is probed again, and the message names
    each backend's last failure."""


class RequestTimeout(GateError):
    """A connect, pool, first-byte, between-chunk or total deadline passed (or HTTP 408).

    ``deadline`` is True when the *call's* deadline (``timeout=``, the scenario's or the
    gateway's ``deadline_s``, or the default) passed or cut the attempt, rather than one of the
    backend's own timeouts: it says nothing about the backend's health, and it is not retried
    — there is no time left.
    """

    retryable = True

    def __init__(self, message: str, *, deadline: bool = False, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        #: the caller's deadline ran out, not a backend timeout
        self.deadline = deadline
        if deadline:
            self.retryable = False


class BadRequestError(GateError):
    """The call itself is wrong (4xx other than 408/409/429, or caught before sending)."""

    retryable = False


class MisaddressedRequestError(BadRequestError):
    """An SDK request on ``gate.http_client(name)`` addressed another server than backend
    ``name``'s (an SDK given no ``base_url=`` addresses its vendor's API): refused unsent.
    ``addressed`` and ``expected`` are the two origins (``scheme://host:port``)."""

    def __init__(
        self, message: str, *, backend: str, addressed: str, expected: str
    ) -> None:
        super().__init__(message, backend=backend, unsent=True)
        self.addressed = addressed
        self.expected = expected


class InvalidConfigError(BadRequestError, ValueError):
    """A configuration value out of range, raised by a constructor that is not a pydantic
    model (``ResponseCache``). A ``ValueError`` naming its field, as the models'
    ``ValidationError`` is, so one ``except ValueError`` covers a service's set-up; still a
    ``BadRequestError``, as it was before."""


class OutOfFundsError(BadRequestError):
    """The provider refused the account behind the backend's key: no balance, credits or
    quota left (a 402; OpenAI's 429 ``insufficient_quota``; Anthropic's "credit balance is too
    low"). Not the call's fault and not a rate limit — waiting does not clear it, topping the
    account up does — so the call moves to another eligible backend and the backend's circuit
    counts it, as for a refused key (gptgate/credential_failover.py)."""

    retryable = False


class RequestTooLargeError(BadRequestError):
    """The request needs more tokens than the backend's whole per-minute (or per-day) budget
    (``prompt + max_tokens > limit``): it can never be admitted, so waiting or retrying only
    holds up every other call. ``limit`` and ``requested`` are the token counts, when known."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        limit: int | None = None,
        requested: int | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.limit = limit
        self.requested = requested


class NoBackendError(GateError):
    """No configured backend is eligible (privacy, tier, model, health) for this call."""

    retryable = False


class OverloadedError(GateError):
    """Shed by gptgate: the call could not be admitted before its deadline or the queue is full."""

    retryable = False


class BudgetExceededError(GateError):
    """The dollar budget (``Gateway(budget=gg.Budget(...))``) has no room for this call: with
    ``on_exceed="raise"`` at once, with ``"throttle"`` when its deadline would pass waiting.
    Nothing was sent. ``spent_usd`` is the spend in the last hour, ``budget_usd`` the hourly
    budget, ``retry_after`` the seconds until room frees up (None: as calls in flight
    settle). Says nothing about any backend's health."""

    retryable = False

    def __init__(
        self, message: str, *, spent_usd: float = 0.0, budget_usd: float = 0.0, **kwargs: object
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.spent_usd = spent_usd
        self.budget_usd = budget_usd


class GatewayClosedError(GateError):
    """The gateway is closing or closed: the call was refused, or it was still running when
    the shutdown grace ran out and was cancelled. Says nothing about any backend's health."""

    retryable = False


class StreamInterruptedError(GateError):
    """A stream ended before its final chunk. Carries what had arrived; its tokens were billed."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        partial_text: str = "",
        output_tokens: int = 0,
        usage_estimated: bool = True,
        usage_so_far: Usage | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.partial_text = partial_text
        self.output_tokens = output_tokens
        self.usage_estimated = usage_estimated
        #: what the stream had said of its usage before the cut (an Anthropic
        #: ``message_start``: the prompt's cache reads and writes), or None
        self.usage_so_far = usage_so_far


class SharedUnreachableError(GateError):
    """``Shared(required=True)``: the fleet's Redis could not be reached at start, so the
    gateway did not open (without ``required`` it starts on local limits). ``url`` is where
    it points, its password masked. Says nothing about any backend's health."""

    retryable = False

    def __init__(self, message: str, *, url: str, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.url = url


class BatchCancelledError(GateError):
    """A batch job's item that never ran because the job was cancelled (``job.cancel()``)
    before the provider reached it. Not retried: the cancellation was asked for."""

    retryable = False


class BatchItemsError(BadRequestError):
    """``gate.batch`` refused a job up front: items that no request can be made of (a
    parameter of the wrong type, messages that are no list, a ``custom_id``, …). Nothing was
    recorded, uploaded or held: a job is one unit, and a nightly job with a broken row fails
    loudly at submission, not hours later with that line — or, at a provider that validates
    the whole set, every line — refused. ``refused`` maps each such item's index to its
    refusal (``"item N: ..."``, naming the field), every one of them, so they are fixed or
    left out in one go; the message is the first one's, and how many more there are."""

    retryable = False

    def __init__(self, refused: dict[int, str], **kwargs: object) -> None:
        message = refused[min(refused)]
        if len(refused) > 1:
            others = sorted(refused)[1:]
            shown = ", ".join(map(str, others[:10])) + (", ..." if len(others) > 10 else "")
            message += f" (and {len(others)} more items refused: {shown}; see .refused)"
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.refused = refused
