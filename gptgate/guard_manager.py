"""A stream manager a guarded function returned unentered — anthropic's
``client.messages.stream(...)``, openai's ``client.chat.completions.stream(...)`` — is entered
by the guard, inside the try that made it.

Such a manager sends nothing until its caller enters it (``async with``); handed back from
``@gate.guard``, that happened after the guard had let go: the request went out without the
guard's permit, retries or span (on ``gate.http_client`` it took a second permit of its own;
a refusal reached the caller as the SDK's error). Entered here, its request is the try's: a
failure before the first byte is the guard's to retry, and the stream it opened is followed
like any other returned stream (gptgate/guard_stream.py: the permit is held until it is read
to its end, closed, or dropped).

The caller gets the same object back, still an instance of the SDK's class: its class is
swapped for a subclass whose ``__aenter__`` hands over the stream already open (``__aexit__``
is the SDK's own and closes it). A manager whose class cannot be swapped comes back as a
proxy with the same ``async with`` behaviour. A sync guarded function's manager
(``SyncGateway.guard``) is entered the same way in the caller's thread, on the try's permit.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["entered", "entered_now", "is_stream_manager"]

R = TypeVar("R")

#: where the swapped manager keeps the stream its ``__enter__``/``__aenter__`` opened
_OPENED = "_gptgate_opened_stream"


def is_stream_manager(value: object, *, sync: bool = False) -> bool:
    """An SDK's not-yet-entered stream context manager (the class name both SDKs use):
    ``async with`` one, or with ``sync`` a ``with`` one (anthropic's ``MessageStreamManager``
    under ``SyncGateway.guard``)."""
    kind = type(value)
    enter, leave = ("__enter__", "__exit__") if sync else ("__aenter__", "__aexit__")
    return (
        kind.__name__.endswith("StreamManager")
        and hasattr(kind, enter)
        and hasattr(kind, leave)
        and _OPENED not in getattr(value, "__dict__", {})
    )


async def entered(body: Awaitable[R]) -> R:
    """What the guarded function returned, a stream manager entered (its request sent)."""
    value = await body
    if not is_stream_manager(value):
        return value
    manager: Any = value
    return _opened(value, await manager.__aenter__())


def entered_now(value: R) -> R:
    """``entered`` for a sync guarded function's value, in the caller's thread."""
    if not is_stream_manager(value, sync=True):
        return value
    manager: Any = value
    return _opened(value, manager.__enter__())


def _opened(manager: R, stream: object) -> R:
    """``manager`` handing over ``stream`` when entered again (its class swapped)."""
    try:
        manager.__class__ = _opened_class(type(manager))
    except TypeError:  # a class with slots or a C layout: a proxy instead
        return _OpenedProxy(manager, stream)  # type: ignore[return-value]
    setattr(manager, _OPENED, stream)
    return manager


#: per SDK manager class, its subclass that hands over the stream opened already
_OPENED_CLASSES: dict[type[Any], type[Any]] = {}


def _opened_class(kind: type[Any]) -> type[Any]:
    """``kind`` whose ``__aenter__``/``__enter__`` returns the stream opened already, and
    whose ``response`` is that stream's (what the guard's follow watches)."""
    opened = _OPENED_CLASSES.get(kind)
    if opened is None:
        opened = _OPENED_CLASSES[kind] = _subclass(kind)
    return opened


def _the_stream(self: Any) -> Any:
    return getattr(self, _OPENED)


async def _the_stream_async(self: Any) -> Any:
    return getattr(self, _OPENED)


def _response(self: Any) -> Any:
    return getattr(getattr(self, _OPENED), "response", None)


def _subclass(kind: type[Any]) -> type[Any]:
    namespace: dict[str, Any] = {
        "response": property(_response),
        "__module__": kind.__module__,
        "__qualname__": kind.__qualname__,
        "__doc__": kind.__doc__,
    }
    if hasattr(kind, "__aenter__"):
        namespace["__aenter__"] = _the_stream_async
    if hasattr(kind, "__enter__"):
        namespace["__enter__"] = _the_stream
    return type(kind.__name__, (kind,), namespace)


class _OpenedProxy:
    """A manager that could not be swapped: entering it hands over its open stream."""

    def __init__(self, manager: Any, stream: Any) -> None:
        self._manager = manager
        self._stream = stream

    @property
    def response(self) -> Any:
        return getattr(self._stream, "response", None)

    async def __aenter__(self) -> Any:
        return self._stream

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._manager.__aexit__(*exc_info)

    def __enter__(self) -> Any:
        return self._stream

    def __exit__(self, *exc_info: Any) -> Any:
        return self._manager.__exit__(*exc_info)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)
