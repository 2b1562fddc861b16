"""A gateway in a forked child: rebuilt fresh on its first touch there, the parent's left alone.

gunicorn ``--preload``, a ``multiprocessing`` fork pool or Celery prefork fork a process that
built — and often used — its gateway. The child's copy holds the parent's sockets (pooled
HTTP connections, the fleet's Redis connection), the parent's event loop and its tasks,
events and calls in flight, none of which the child may use or close: a request written there
goes out on the parent's connection (and the parent reads its answer), a close there sends
the parent's fleet releases, and an asyncio transport closed through the parent's loop
object would unregister the parent's socket from the epoll instance parent and child share.

So at the fork every gateway is *parked*: its attributes as they were are kept referenced for
good (never closed nor finalized in the child, not even at its exit: a finalizer may close
what it holds, and nothing of the parent's is the child's to close), and its class swapped
for one
whose first attribute access rebuilds it. The rebuild runs the gateway's ``__init__`` again
with the arguments it was built with: the child's gateway is the one ``Gateway(same
arguments)`` would be — its own pools, fleet client (a new fleet worker, holding none of the
parent's permits), cache gate, batchers, ledger and budget, limits and circuits learned anew
(or from ``state=``, as any new gateway). That is what a ``gg.SyncGateway`` always did in a
child (it built a fresh gateway), now the one path for both: a ``SyncGateway``'s gateway is
rebuilt by this same touch.

Why fresh and not the parent's learned state: the ledger and budget are per process, and a
child starting from the parent's would count the parent's spending once per worker; the
adaptive limit is a per-process limit, learned while the parent was alone on the backend —
N workers each starting there would put N times it on the backend; a circuit the parent
opened is found open again within ``breaker_threshold`` calls, and with ``shared=`` the
fleet's circuits, pauses and warm prefixes are read from Redis anyway. A warm start is still
one argument away: ``state=`` (a file each worker reads at its start).

A gateway that was *open* in the parent is open in the child too, on no loop yet: its first
awaited call there (``chat``, ``map``, ``warm``, ``submit``, ``embed``, a guarded call, an SDK
request) opens it on the calling loop — and a later loop's first call opens it again, once
the first loop has ended (which closes it, as it closes any gateway left open). An explicit
``aclose()`` ends that. ``gate.stream(...)`` is not awaited and cannot open it: a typed
error says to open it first.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["NOT_OPEN_HERE", "open_in_child", "rebuildable"]

F = TypeVar("F", bound=Callable[..., None])

#: what a call that cannot open the gateway here (``gate.stream``) is told in the child
NOT_OPEN_HERE = (
    "this gateway was open in the parent process when it forked; in this process it is "
    "rebuilt fresh and opens on its first awaited call (gate.chat, map, warm, embed, a "
    "guarded call, an SDK request) or with `async with gate:` — gate.stream() is not awaited "
    "and cannot open it: await a call first, or open it with `async with gate:`"
)


#: every gateway of the process, for the fork hook (weak: a gateway dropped is gone)
_GATES: weakref.WeakSet[Any] = weakref.WeakSet()
#: the parents' gateways' attributes, as they were at each fork: referenced for good
_PARKED: list[dict[str, Any]] = []
# one reference no interpreter shutdown drops: parked objects are never finalized here
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_PARKED))
#: the class a forked gateway wears until its first touch, per gateway class
_TOUCH: dict[type, type] = {}
#: what a rebuild keeps of the gateway as it was: tests' injected fleet periods (not state)
_CARRIED = ("_fleet_options",)
#: one rebuild at a time: another thread touching the gateway meanwhile waits for it, and
#: the rebuilding thread's own reads (an RLock) pass straight through
_LOCK = threading.RLock()


def rebuildable(init: F) -> F:
    """Decorate ``Gateway.__init__``: remember its arguments, for the rebuild in a child."""

    @functools.wraps(init)
    def build(self: object, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        vars(self)["_built_with"] = (init, args, kwargs)
        _GATES.add(self)

    return cast(F, build)


def _first_touch(self: Any, name: str) -> Any:
    """``__getattribute__`` of a forked gateway: rebuild, wear the real class, then read."""
    with _LOCK:
        state = object.__getattribute__(self, "__dict__")
        touch = type(self)
        if touch in _TOUCH.values() and not state.get("_rebuilding"):
            state["_rebuilding"] = True  # the rebuild's own reads (this thread) go straight
            try:
                _rebuild(self)
            finally:
                del state["_rebuilding"]
            object.__setattr__(self, "__class__", touch.__mro__[1])  # rebuilt: the real one
    return object.__getattribute__(self, name)


def _rebuild(gate: Any) -> None:
    state = vars(gate)
    init, args, kwargs = state["_built_with"]
    was_open = state["_opened"].phase == "forked"  # gptgate/opened.py marked it at the fork
    carried = {key: state[key] for key in _CARRIED if key in state}
    init(gate, *args, **kwargs)  # the parent's objects stay parked: only new ones here
    state.update(carried)
    gate._opened.auto = was_open


def _forked() -> None:
    """In the child, right after the fork: park every gateway (no lock, no I/O — only the
    forking thread runs here), to be rebuilt on its first touch."""
    global _LOCK
    _LOCK = threading.RLock()  # another thread may have held it at the fork
    for gate in list(_GATES):
        _PARKED.append(dict(object.__getattribute__(gate, "__dict__")))
        cls = type(gate)
        if cls in _TOUCH.values():  # forked again before it was touched: parked once more
            continue
        touch = _TOUCH.get(cls)
        if touch is None:
            touch = _TOUCH[cls] = type(
                cls.__name__, (cls,), {"__getattribute__": _first_touch, "__slots__": ()}
            )
        object.__setattr__(gate, "__class__", touch)


async def open_in_child(gate: Any) -> None:
    """In a child, a gateway open in the parent and not yet open here: open it on this loop
    (the first awaited call does, for its caller). Tasks arriving while it opens wait for it;
    open elsewhere or closing, the call's own checks say so."""
    opened = gate._opened
    if not opened.auto:  # every other process, every call: one attribute read
        return
    if opened.phase == "opening" and opened.opening_here():
        await opened.wait_opened()
    elif opened.phase == "closed":
        await gate.start()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forked)
