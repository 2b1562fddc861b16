"""A call span's outcome, told the same way on every path that ends one.

``gate.chat``'s run, a visible stream and a tier escalation's shared span each end a call
span once, with what failed it: the ``GateError`` out of the call, or — cancelled — the
gateway's shutdown (a caller's own cancellation is no failure). Three near-copies of that
``try``/``except``/``finally`` told it before; one piece keeps them from drifting apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import GateError

__all__ = ["ended_call"]


@contextmanager
def ended_call(
    shutdown_error: Callable[[], GateError | None],
    end: Callable[[GateError | None], None],
    on_error: Callable[[GateError], None] | None = None,
) -> Iterator[None]:
    """Run the block, then ``end(failure)`` on every path: the ``GateError`` it raised (told
    to ``on_error`` first), ``shutdown_error()`` when it was cancelled, else None."""
    failure: GateError | None = None
    try:
        yield
    except GateError as error:
        failure = error
        if on_error is not None:
            on_error(error)
        raise
    except BaseException as exc:
        if not isinstance(exc, Exception):  # cancelled or closed: by the shutdown, it failed
            failure = shutdown_error()
        raise
    finally:
        end(failure)
