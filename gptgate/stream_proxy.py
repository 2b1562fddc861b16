"""The proxy a guard returns for a stream of the application's own iterator class is still,
to ``isinstance``, an object of that class.

A guard follows a returned stream to its end (its permit with it), so it hands back a proxy
that reads and closes the stream through its watch. That proxy used to be a plain object:
``isinstance(result, Chunks)`` was False and code branching on its own type took the wrong
branch. The proxy now reports the original's class as its ``__class__``, as
``unittest.mock`` does for a spec: ``isinstance``, ABCs, runtime protocols and
``functools.singledispatch`` see the original's class, and attributes are read from and
written to the original. Not chosen: a subclass made on the fly (it runs the class's
``__init_subclass__``, breaks on ``__slots__``, metaclasses and final classes, and its methods
would run on an object holding none of the original's state) and swapping the original's
class in place (the stream would then be its own watch's facade, and a stream its caller
dropped unread would no longer be noticed). ``type(proxy)`` still names the proxy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .stream_reads import LeftByCaller, StreamReads

__all__ = ["FollowedIterator", "ProxyOf"]


class ProxyOf:
    """Stands in for ``_original``: its class to ``isinstance``, its attributes."""

    _original: Any
    #: the proxy's own attributes; any other is the original's
    _OWN: frozenset[str] = frozenset({"_original"})

    @property  # type: ignore[misc]
    def __class__(self) -> type[Any]:  # what isinstance and singledispatch read
        return type(self._original)

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._OWN:  # not set yet (a half-built proxy): no recursion
            raise AttributeError(name)
        return getattr(self._original, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._original, name, value)

    def __repr__(self) -> str:
        return repr(self._original)


class FollowedIterator(ProxyOf):
    """A sync iterator with ``close`` a guarded function returned (not a generator, no HTTP
    response): ``ended`` is told once it is read to its end (None), cut by an error (that
    error), or closed or dropped before its end (``LeftByCaller``: no success), and the
    original is closed at its end."""

    _OWN = frozenset({"_original", "_ended", "_reads"})

    def __init__(
        self, original: Any, ended: Callable[[Exception | None], None], reads: StreamReads
    ) -> None:
        self._original = original
        self._ended: Callable[[Exception | None], None] | None = ended
        #: counted for the loop, which may refuse the next read (the idle bound)
        self._reads = reads

    def _end(self, error: Exception | None = None) -> None:
        ended, self._ended = self._ended, None
        if ended is not None:
            ended(error)

    def __iter__(self) -> FollowedIterator:
        return self

    def __next__(self) -> Any:
        try:
            return self._reads.next_of(self._original)
        except StopIteration:
            self._close(None)
            raise
        except Exception as error:
            self._end(error)
            raise

    def close(self) -> None:
        self._close(LeftByCaller())

    def _close(self, how: Exception | None) -> None:
        try:
            self._original.close()
        finally:
            self._end(how)

    def __enter__(self) -> FollowedIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self._ended is not None:  # dropped before its end
            self._end(LeftByCaller())
