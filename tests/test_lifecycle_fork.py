"""One open ``Gateway`` reached from where it was not opened: another event loop of the same
thread (a loop parked while another runs, as a session-scoped test fixture's is), and a
process forked while it was open (``ProcessPoolExecutor`` from an async app, ``--preload``).

Over real loopback HTTP: the simulator's bills say which prompts reached the server. Each
case sent its request on the owner's pooled connection before it failed; after a fork, the
server's answer to the child's prompt was then read by the parent's next call. (A forked
child now calls through a gateway rebuilt fresh there: tests/test_gateway_fork.py.)
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gptgate as gg
from gptgate.sim import SimEngine, SimServer, get_profile

ROOT = Path(__file__).resolve().parent.parent
SCALE = 50.0


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    profile = get_profile("gpu").model_copy(update={"output_tokens_mean": 20})
    engine = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=5)
    engine.ledger.keep_bills()
    with SimServer(engine, time_scale=SCALE) as base_url:
        yield base_url, engine


def _prompts(engine: SimEngine) -> list[str]:
    return [bill.prompt for bill in engine.ledger.bills]


def _gate(base_url: str) -> gg.Gateway:
    return gg.Gateway([gg.Backend(name="sim", base_url=base_url, model="m")])


# -- another loop of the same thread ------------------------------------------------------


def test_a_second_loop_of_the_owners_thread_is_refused_before_anything_is_sent(
    server: tuple[str, SimEngine],
) -> None:
    """The owner's loop is parked (not running) while the same thread runs another: the
    loop was known by its thread only, so the second loop's call went through, wrote its
    request on the owner's pooled connection and then failed with an untyped RuntimeError
    ("bound to a different event loop"); its ``async with gate`` was told the gateway was
    "already open in this event loop". Now each is the typed other-loop error, sent nothing,
    and the owner's loop goes on."""
    base_url, engine = server
    gate = _gate(base_url)
    owner = asyncio.new_event_loop()
    try:
        owner.run_until_complete(gate.start())
        assert owner.run_until_complete(gate.chat(_user("owner first"))).text

        async def intruder() -> None:
            await asyncio.wait_for(gate.chat(_user("second loop")), 5.0)

        async def opener() -> None:
            async with gate:
                pass

        with pytest.raises(gg.GateError, match="another event loop"):
            asyncio.run(intruder())
        with pytest.raises(gg.GateError, match="another event loop"):
            asyncio.run(opener())
        with pytest.raises(gg.GateError, match="close it from the loop"):
            asyncio.run(gate.aclose())
        assert _prompts(engine) == ["owner first"]
        again = owner.run_until_complete(gate.chat(_user("owner again")))
        assert again.text and _prompts(engine) == ["owner first", "owner again"]
    finally:
        owner.run_until_complete(gate.aclose())
        owner.close()
    assert asyncio.run(_open_and_call(gate, "a later loop")) == "a later loop"


def test_a_gateway_whose_loop_was_closed_under_it_says_so(
    server: tuple[str, SimEngine],
) -> None:
    """The pre-``asyncio.run`` pattern: ``loop.run_until_complete(main())`` opens the gateway,
    then ``loop.close()`` — no task cancelled, the gateway never closed, and nothing can
    close it any more. Every later loop was told it "belongs to another event loop while it
    is open there", an owner that no longer exists; now the error names what happened and
    what to do."""
    base_url, engine = server
    gate = _gate(base_url)
    dead = asyncio.new_event_loop()
    dead.run_until_complete(gate.start())
    dead.close()
    with pytest.raises(gg.GateError, match="was closed with the gateway still open"):
        asyncio.run(_open_and_call(gate, "after the loop closed"))

    async def call() -> None:
        await gate.chat(_user("a call after the loop closed"))

    with pytest.raises(gg.GateError, match="was closed with the gateway still open"):
        asyncio.run(call())
    assert _prompts(engine) == []


async def _open_and_call(gate: gg.Gateway, text: str) -> str:
    async with gate:
        await gate.chat(_user(text))
    return text


# -- a process forked while the gateway was open ------------------------------------------

FORK_SCRIPT = """
import asyncio, sys
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
import gptgate as gg

gate = gg.Gateway([gg.Backend(name="sim", base_url=sys.argv[1], model="m")])
USER = lambda text: [{"role": "user", "content": text}]

def outcome(coro):
    try:
        asyncio.run(asyncio.wait_for(coro, 5))
        return "done"
    except gg.GateError as error:
        return f"{type(error).__name__} fork={'fork' in str(error)}"
    except BaseException as error:
        return f"untyped {type(error).__name__}"

async def open_and_call():
    async with gate:
        await gate.chat(USER("child opened"))

def in_worker():
    # a worker of the app's process pool calls the module's gateway, open in the parent
    return [
        outcome(gate.chat(USER("child " + "long " * 300))),
        outcome(open_and_call()),
        outcome(gate.aclose()),
    ]

async def main():
    async with gate:
        await gate.chat(USER("parent first"))  # a pooled keep-alive connection
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
        with pool:
            print(*await asyncio.get_running_loop().run_in_executor(pool, in_worker), sep="\\n")
        again = await gate.chat(USER("parent again"))
        print("parent's own answer", again.usage.input_tokens < 50)

asyncio.run(main())
"""


def test_a_process_pool_forked_with_the_gateway_open_calls_through_a_fresh_gateway(
    server: tuple[str, SimEngine], tmp_path: Path
) -> None:
    """An async app opens its module-level gateway, then forks a process pool (the
    ``multiprocessing`` fork context); a worker calls the gateway. At first the worker's
    request went out on the parent's pooled connection (its TCP socket shared by the fork)
    and the parent's next call read the server's answer to the *worker's* prompt; then the
    worker was refused with a GateError naming the fork. Now the worker's gateway is rebuilt
    fresh on its first use there (gptgate/fork_rebuild.py): its call opens it on the
    worker's loop with its own connections and is answered, ``async with gate`` opens it
    again on a later loop, ``aclose()`` closes only the worker's; the parent reads its own
    answers."""
    base_url, engine = server
    script = tmp_path / "forked.py"
    script.write_text(textwrap.dedent(FORK_SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script), base_url], capture_output=True, text=True, timeout=60,
        cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["done", "done", "done", "parent's own answer True"]
    assert sorted(prompt[:12] for prompt in _prompts(engine)) == [
        "child long l", "child opened", "parent again", "parent first",
    ]


# -- a process that exits with the gateway open -------------------------------------------

LEFT_OPEN_SCRIPT = """
import asyncio, sys, threading
import gptgate as gg

gate = gg.Gateway(
    [gg.Backend(name="sim", base_url=sys.argv[1], model="m", concurrency="auto")],
    state=sys.argv[2],
)
loop = asyncio.new_event_loop()  # run by a thread of the app (docs/guide/closing.md)
threading.Thread(target=loop.run_forever, daemon=True).start()
on_loop = lambda coroutine: asyncio.run_coroutine_threadsafe(coroutine, loop).result()
on_loop(gate.start())
on_loop(gate.chat([{"role": "user", "content": "left open"}]))
print("exiting with the gateway open", flush=True)
"""


def test_a_process_exiting_with_the_gateway_open_writes_its_state_file(
    server: tuple[str, SimEngine], tmp_path: Path
) -> None:
    """``state=`` is "written on exit". A process whose gateway was still open on a loop of
    its own thread (or a parked one) when it exited never wrote it: that loop never ran
    again to close the gateway, and the next start was cold. Now the interpreter's exit
    writes it for any gateway still open."""
    path = tmp_path / "gptgate-state.json"
    script = tmp_path / "left_open.py"
    script.write_text(textwrap.dedent(LEFT_OPEN_SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script), server[0], str(path)], capture_output=True, text=True,
        timeout=60, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["exiting with the gateway open"]
    assert "sim" in json.loads(path.read_text())["backends"]
