"""Why a gateway is not sent to another process: ``pickle.dumps(gate)`` is a clear TypeError.

A gateway holds connection pools, its event loop's tasks and the state of the calls in
flight: none of it means anything in another process. Passed to a ``multiprocessing`` pool
with the ``spawn`` method (or ``copy.copy``-ed), it failed on whatever attribute pickle met
first ("Can't pickle local object 'Ledger.__init__.<locals>.<lambda>'", "cannot pickle
'_thread.lock' object"), naming nothing a user could act on. Its configuration pickles:
send that, and build the gateway in the worker.
"""

from __future__ import annotations

from typing import NoReturn

__all__ = ["refuse_pickle"]


def refuse_pickle(gate: object, protocol: object = None) -> NoReturn:
    """``__reduce_ex__`` of a gateway: what to send instead."""
    kind = type(gate).__name__
    raise TypeError(
        f"a {kind} cannot be pickled (sent to another process) or copied: its connection "
        "pools, event loop tasks and calls in flight belong to this process. Send its "
        "configuration instead — its list of gg.Backend, or its GatewayConfig (a Gateway's "
        f".config) as gg.{kind}(config=...) — and build one {kind} per process (a pool's "
        "initializer, or at module level of the worker's code)"
    )
