"""Closing a ``SyncGateway`` while a guarded sync function still runs in its caller's thread.

The guard holds the call's permit until the function returns (a sync function cannot be cut),
so the loop waits for the thread's answer; ``close()`` stops the portal meanwhile. The answer
must still reach the loop, or the loop's thread never ends and ``close()`` never returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import gptgate as gg

#: no request is made: the guarded functions below never touch the network
BASE_URL = "http://127.0.0.1:9/v1"


def _until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.002)
    assert done()


def _gate() -> gg.SyncGateway:
    return gg.SyncGateway([gg.Backend(name="b", base_url=BASE_URL, model="m", concurrency=1)])


def test_close_while_a_guarded_function_runs_returns_and_ends_the_call_typed() -> None:
    gate = _gate()
    entered, release = threading.Event(), threading.Event()

    @gate.guard()
    def slow() -> str:
        entered.set()
        release.wait(30)
        return "done"

    @gate.guard()
    def queued() -> str:  # waits for the permit ``slow`` holds
        return "never"

    outcomes: dict[str, object] = {}

    def call(name: str, fn: Callable[[], str]) -> None:
        try:
            outcomes[name] = fn()
        except BaseException as error:  # what the caller is told
            outcomes[name] = error

    callers = [threading.Thread(target=call, args=("slow", slow), daemon=True)]
    callers[0].start()
    assert entered.wait(10)
    callers.append(threading.Thread(target=call, args=("queued", queued), daemon=True))
    callers[1].start()
    _until(lambda: gate.stats()["b"].queued == 1)
    portal = gate._loop.portal()
    closer = threading.Thread(target=gate.close, kwargs={"grace_s": 0.0}, daemon=True)
    closer.start()
    # the portal stops taking calls: only now does the function return
    _until(lambda: portal._event_loop_thread_id is None)
    release.set()
    closer.join(10)
    assert not closer.is_alive(), "close() hung on the guarded call"
    for caller in callers:
        caller.join(10)
        assert not caller.is_alive(), "a guarded caller hung"
    assert isinstance(outcomes["queued"], gg.GatewayClosedError)
    # the function ran to its end (its work is done, maybe paid for): its caller gets it
    assert outcomes["slow"] == "done"
    assert [t.name for t in threading.enumerate() if t.name.startswith("gptgate-sync")] == []
