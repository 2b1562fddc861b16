"""A stream that ended early: whose doing it was decides what its backend's circuit hears —
one rule for ``gate.stream``, ``@gate.guard`` around a streaming SDK call, and an SDK on
``gate.http_client``.

* **The server's or the network's** — a reset, an idle timeout mid-stream, an event stream
  that ended without its terminal event (a clean EOF before ``[DONE]``, ``message_stop``, a
  finish reason), an error event of the server's: the backend's failure, counted towards its
  circuit as what cut it (an error event that names the request's own fault, a 400, counts
  as a 400 would: not at all).
* **The caller's** — a ``break`` and close, a cancelled task, the call's own deadline, the
  gateway's shutdown: nothing. Not a failure, and not a success either: a stream's verdict
  comes at its end, so one its caller left does not end a run of failures.

Before, the paths disagreed: a cut ``gate.stream`` never counted (``StreamInterruptedError``
was "no sign the backend is down"), so a backend that cut every stream after its first token
kept its circuit closed; an SDK's cut stream on ``gate.http_client`` counted; a guard's stream
counted as a success the moment the function returned it, and its cut not at all; and an SDK
stream read to a clean EOF without its terminal event was a success
(tests/test_stream_cut_circuit.py). A sync guard's returned generator or iterator class
closed early was a success too (tests/test_sync_guard_generator_left.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import (
    BackendError,
    GateError,
    GatewayClosedError,
    RequestTimeout,
    StreamInterruptedError,
)
from .shed import is_shed

if TYPE_CHECKING:
    from .observe import ResponseTap

__all__ = ["EARLY_END", "by_caller", "circuit_failure", "ended_early", "interrupted", "what_cut"]

#: what an event stream that ended before its terminal event was cut by
EARLY_END = "the event stream ended before its terminal event (no [DONE] or finish reason)"


def what_cut(error: BaseException) -> BaseException:
    """What cut a stream mid-answer (a deadline, a timeout, a reset), else the error itself."""
    if isinstance(error, StreamInterruptedError) and error.__cause__ is not None:
        return error.__cause__
    return error


def by_caller(error: BaseException) -> bool:
    """The caller's side ended this attempt (also a stream cut mid-answer): the call's own
    deadline, or the gateway's shutdown — no sign of the backend's health or load."""
    cut = what_cut(error)
    return isinstance(cut, GatewayClosedError) or (
        isinstance(cut, RequestTimeout) and cut.deadline
    )


def circuit_failure(error: GateError) -> GateError | None:
    """What ``error`` counts as towards its backend's circuit (the failure to remember as
    its cause), None: nothing. A server failure (5xx, 409, a broken connection, a malformed
    answer) or a timeout counts; a busy server's refusal (gptgate/shed.py), the request's own
    fault and the caller's doing do not. A stream cut mid-answer counts as what cut it — one
    cut with no typed cause (an EOF before its end, a reset) as the server's failure."""
    if by_caller(error):
        return None
    if isinstance(error, StreamInterruptedError):
        cause = error.__cause__
        if isinstance(cause, GateError) and circuit_failure(cause) is None:
            return None
        return error
    if is_shed(error):
        return None
    return error if isinstance(error, (BackendError, RequestTimeout)) else None


def interrupted(view: GateError, backend: str) -> StreamInterruptedError:
    """A stream another client read, cut under it (``view``: gptgate's reading of the
    client's exception, or of the early end), as ``gate.stream`` raises it."""
    error = StreamInterruptedError(f"stream cut: {view.message}", backend=backend)
    error.__cause__ = view
    return error


def ended_early(tap: ResponseTap) -> bool:
    """An event stream of a chat, completion or Messages answer that reached a clean EOF
    without its terminal event (``[DONE]``, ``message_stop``, ``response.completed``) or a
    finish reason, and said no error of its own: the server cut it — the SDK reading it
    raises nothing (openai's and anthropic's streams just end), so gptgate says so. A body
    the tap could not read (it gave up) is not judged."""
    return (
        tap.streamed and not tap.complete and tap.finish_reason is None
        and tap.failure is None and not tap.malformed
    )
