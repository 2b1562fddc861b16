"""Opening and closing a gateway from the tasks and threads real apps use: a startup hook and a
shutdown hook in different tasks, ``run_coroutine_threadsafe``, two request threads that each
run their own event loop on one shared gateway, a loop that ends without closing it.

Each interleaving is forced with events (never timing): thread A holds the gateway open,
opening or closing while thread B's loop tries to open, call or close it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

import gptgate as gg

from .mockbackend import USER, Script, backend, gateway, ok

BACKENDS = ["asyncio", "trio"]


async def _use(gate: gg.Gateway) -> str:
    with anyio.fail_after(5.0):  # a wedged gateway fails the test, never hangs it
        async with gate:
            return (await gate.chat(USER)).text


def _in_thread(target: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


# -- 7. aclose from another task than start ---------------------------------------------------


async def _slow(request: httpx2.Request) -> httpx2.Response:
    await anyio.sleep(30.0)
    return ok()


async def _close_from_another_task() -> dict[str, Any]:
    """The startup hook opens the gateway in a task of its own, a call is running, the
    shutdown hook closes it from another task with a short grace."""
    script = Script(ok("first"), _slow, ok("again"))
    gate = gateway(backend(script))
    outcome: dict[str, Any] = {}
    async with anyio.create_task_group() as hooks:
        hooks.start_soon(gate.start)  # the startup hook
    outcome["first"] = (await gate.chat(USER)).text

    async def slow_call() -> None:
        try:
            await gate.chat(USER)
        except gg.GateError as error:
            outcome["slow"] = type(error).__name__

    async with anyio.create_task_group() as app:
        app.start_soon(slow_call)
        while script.in_flight == 0:
            await anyio.sleep(0.001)
        async with anyio.create_task_group() as hooks:
            hooks.start_soon(lambda: gate.aclose(grace_s=0.05))  # the shutdown hook
    stats = gate.stats()["mock"]
    outcome["held"] = (stats.in_flight, stats.queued, stats.pool.checked_out)
    outcome["again"] = await _use(gate)  # and it opens again in yet another task
    return outcome


@pytest.mark.parametrize("library", BACKENDS)
def test_aclose_from_another_task_than_start_closes_with_grace(library: str) -> None:
    """``aclose()`` in another task than ``start()`` raised an untyped RuntimeError ("exit
    cancel scope in a different task"). Now it closes as usual: the call still running after
    the grace ends in ``GatewayClosedError`` and every permit and connection is back."""
    outcome = anyio.run(_close_from_another_task, backend=library)
    assert outcome == {
        "first": "first",
        "slow": "GatewayClosedError",
        "held": (0, 0, 0),
        "again": "again",
    }


def test_start_chat_and_aclose_through_run_coroutine_threadsafe() -> None:
    """A sync app driving a loop in a thread: each step is its own task of that loop."""
    loop = asyncio.new_event_loop()
    runner = _in_thread(loop.run_forever)
    gate = gateway(backend(Script(ok("threadsafe"))))
    try:

        def run(coroutine: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(coroutine, loop).result(5.0)

        run(gate.start())
        assert run(gate.chat(USER)).text == "threadsafe"
        run(gate.aclose())
        assert gate.stats()["mock"].in_flight == 0
        with pytest.raises(gg.GatewayClosedError):
            run(gate.chat(USER))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5.0)
        loop.close()


# -- 6. two threads, two event loops, one gateway -------------------------------------------


class _Owner:
    """Thread A: opens the gateway in its own loop and holds it open until told to close;
    ``hold`` (optional) runs inside the open block first."""

    def __init__(self, gate: gg.Gateway) -> None:
        self.gate = gate
        self.opened = threading.Event()
        self.release = threading.Event()
        self.text: str | None = None
        self.thread = _in_thread(lambda: anyio.run(self._run))

    async def _run(self) -> None:
        async with self.gate:
            self.opened.set()
            await anyio.to_thread.run_sync(self.release.wait)
            self.text = (await self.gate.chat(USER)).text

    def close(self) -> None:
        self.release.set()
        self.thread.join(5.0)
        assert not self.thread.is_alive()


@pytest.fixture
def owner() -> Iterator[_Owner]:
    owner = _Owner(gateway(backend(Script(ok("owner")))))
    assert owner.opened.wait(5.0)
    yield owner
    owner.release.set()
    owner.thread.join(5.0)


def test_a_second_loop_opening_an_open_gateway_gets_a_typed_error(owner: _Owner) -> None:
    """Thread B's ``async with gate`` while thread A has it open raised RuntimeError("already
    open"); when both opened at once, A's task group was replaced under it. Now B gets a
    GateError naming the supported ways, A's request still succeeds, and afterwards a new
    loop opens the gateway again."""
    gate = owner.gate
    with pytest.raises(gg.GateError, match=r"another event loop.*SyncGateway"):
        anyio.run(_use, gate)
    with pytest.raises(gg.GateError, match=r"another event loop.*close it from the loop"):
        anyio.run(gate.aclose)  # B's shutdown must not close A's gateway
    owner.close()
    assert owner.text == "owner"
    assert anyio.run(_use, gate) == "owner"


def test_a_second_loop_is_refused_while_the_first_is_still_opening(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B arrives while A's ``start()`` is half-way (the flag "open" not yet set): both used to
    go on building, each over the other's task group."""
    gate = gateway(backend(Script(ok("owner"))))
    halfway, go_on = threading.Event(), threading.Event()
    start_fleet = gate._start_fleet

    async def slow_start_fleet(task_group: Any) -> None:
        halfway.set()
        await anyio.to_thread.run_sync(go_on.wait, abandon_on_cancel=True)
        await start_fleet(task_group)

    monkeypatch.setattr(gate, "_start_fleet", slow_start_fleet)
    texts: list[str] = []
    first = _in_thread(lambda: texts.append(anyio.run(_use, gate)))
    assert halfway.wait(5.0)
    with pytest.raises(gg.GateError, match="another event loop"):
        anyio.run(_use, gate)
    go_on.set()
    first.join(5.0)
    assert texts == ["owner"]
    assert anyio.run(_use, gate) == "owner"


def test_a_second_loop_is_refused_while_the_first_is_still_closing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B arrives while A's ``aclose()`` is still under way: refused, then free to open it
    once A's close has returned."""
    gate = gateway(backend(Script(ok("owner"))))
    closing, go_on = threading.Event(), threading.Event()

    def slow_save_state() -> None:  # the last step of A's close, in A's loop thread
        closing.set()
        assert go_on.wait(5.0)

    monkeypatch.setattr(gate, "_save_state", slow_save_state)
    first = _in_thread(lambda: anyio.run(_use, gate))
    assert closing.wait(5.0)
    with pytest.raises(gg.GateError, match="another event loop"):
        anyio.run(_use, gate)
    go_on.set()
    first.join(5.0)
    assert anyio.run(_use, gate) == "owner"


def test_two_request_threads_racing_to_open_one_gateway() -> None:
    """What a Flask app does without guidance: two request threads, each ``asyncio.run``
    with ``async with gate``, started together. Whatever the interleaving, each ends in
    success or a typed GateError, at least one succeeds, and the gateway stays usable."""

    async def slow_answer(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(0.02)
        return ok("served")

    for _ in range(6):
        gate = gateway(backend(Script(slow_answer)))
        start = threading.Barrier(2)
        outcomes: list[object] = []

        def request(
            gate: gg.Gateway = gate,
            start: threading.Barrier = start,
            outcomes: list[object] = outcomes,
        ) -> None:
            start.wait(5.0)
            try:
                outcomes.append(asyncio.run(_use(gate)))
            except BaseException as error:  # every outcome is judged below
                outcomes.append(error)

        threads = [_in_thread(request), _in_thread(request)]
        for thread in threads:
            thread.join(10.0)
        assert len(outcomes) == 2
        assert all(o == "served" or isinstance(o, gg.GateError) for o in outcomes), outcomes
        assert "served" in outcomes
        assert asyncio.run(_use(gate)) == "served"


@pytest.mark.parametrize("library", BACKENDS)
def test_a_loop_that_ends_with_the_gateway_open_leaves_it_usable(library: str) -> None:
    """``start()`` without ``aclose()``, and the loop ends (a script, a request handler that
    returned early): the next loop, in this thread or another, found it "already open" for
    good. Now the gateway's own task sees its loop end, closes its pools, and lets go."""
    gate = gateway(backend(Script(ok("again"))))
    anyio.run(gate.start, backend=library)
    assert anyio.run(_use, gate, backend=library) == "again"
    anyio.run(gate.start, backend=library)
    texts: list[str] = []
    _in_thread(lambda: texts.append(anyio.run(_use, gate, backend=library))).join(5.0)
    assert texts == ["again"]


def test_a_failed_start_lets_go_of_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = gateway(backend(Script(ok("after"))))

    async def broken_fleet(task_group: Any) -> None:
        raise OSError("no route")

    monkeypatch.setattr(gate, "_start_fleet", broken_fleet)
    with pytest.raises(OSError, match="no route"):
        anyio.run(_use, gate)
    monkeypatch.undo()
    assert anyio.run(_use, gate) == "after"


async def test_opening_twice_in_one_loop_is_a_typed_error() -> None:
    gate = gateway(backend(Script(ok())))
    async with gate:
        with pytest.raises(gg.GateError, match="already open in this event loop"):
            await gate.start()
        await gate.chat(USER)


async def test_a_background_task_that_fails_is_raised_when_the_gateway_closes() -> None:
    """The background group now lives in a task of its own: a crash there no longer cancels
    the caller's ``async with`` body, and is not lost either — ``aclose()`` raises it."""
    gate = gateway(backend(Script(ok("still served"))))

    async def crash() -> None:
        raise ValueError("background boom")

    with pytest.raises(ExceptionGroup) as raised:
        async with gate:
            assert gate._spawn(crash)
            while gate._task_group is not None:
                await anyio.sleep(0.001)
            assert (await gate.chat(USER)).text == "still served"
    assert raised.group_contains(ValueError, match="background boom")
    assert await _use(gate) == "still served"


@pytest.mark.parametrize("library", BACKENDS)
def test_a_loop_that_ends_with_the_gateway_open_still_writes_its_state_file(
    library: str, tmp_path: Path
) -> None:
    """``Gateway(state=path)`` is "written on exit": a script whose loop ended after
    ``start()`` with no ``aclose()`` had its gateway closed by the loop's end, but the file
    was never written — the next start was cold. Now that close saves it too."""
    path = tmp_path / "gptgate-state.json"
    gate = gateway(backend(Script(ok("once")), concurrency="auto"), state=path)

    async def open_and_leave() -> None:
        await gate.start()
        await gate.chat(USER)

    anyio.run(open_and_leave, backend=library)
    assert "mock" in json.loads(path.read_text())["backends"]
