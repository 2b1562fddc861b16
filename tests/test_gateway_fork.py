"""An async ``Gateway`` open at a ``fork()`` works in the child: rebuilt fresh there on first
use, the parent's connections, calls in flight and fleet permits left alone.

The production case: gunicorn ``--preload``, a ``multiprocessing`` fork pool or Celery
prefork, where the parent opened and used the gateway before its workers were forked. The
child used to get a typed refusal ("forked") on every call and open. Each case runs in a
fresh interpreter that really forks (os.fork), against the simulator's loopback server (and a
real redis-server for ``shared=``); the simulator's bills say which prompts reached it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import gptgate as gg
from gptgate.sim import SimEngine, SimServer, get_profile
from tests.fleettools import namespace

ROOT = Path(__file__).resolve().parent.parent
SCALE = 50.0


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    profile = get_profile("gpu").model_copy(update={"output_tokens_mean": 30})
    engine = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=7)
    engine.ledger.keep_bills()
    with SimServer(engine, time_scale=SCALE) as base_url:
        yield base_url, engine


def _prompts(engine: SimEngine) -> list[str]:
    return sorted(bill.prompt for bill in engine.ledger.bills)


def _run(source: str, *args: str, tmp_path: Path) -> list[str]:
    """``source`` in a fresh interpreter (it forks): a hang fails at the timeout."""
    script = tmp_path / "forks.py"
    script.write_text(textwrap.dedent(source))
    done = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", str(script), *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout.splitlines()


COMMON = """
import asyncio, os, sys
import gptgate as gg

USER = lambda text: [{"role": "user", "content": text}]

def in_child(body):
    # the child runs its own loops; a failure is printed, never raised past os._exit
    try:
        body()
    except BaseException as error:
        print("child failed", type(error).__name__, error, flush=True)
    finally:
        sys.stdout.flush()
        os._exit(0)

async def wait_for(pid):
    _, status = await asyncio.get_running_loop().run_in_executor(None, os.waitpid, pid, 0)
    return os.waitstatus_to_exitcode(status)
"""

OPEN_AND_USED = COMMON + """
gate = gg.Gateway([gg.Backend(name="sim", base_url=sys.argv[1], model="m", concurrency=4)])

def child():
    async def two_calls():
        first = await gate.chat(USER("child one"))  # no `async with` here: opened by the call
        second = await gate.chat(USER("child two"))
        return first, second
    first, second = asyncio.run(two_calls())
    again = asyncio.run(gate.chat(USER("child three")))  # another loop of the child's
    entry = gate.ledger.entries["sim"]
    tokens = sum(r.usage.input_tokens + r.usage.output_tokens for r in (first, second, again))
    print("child", entry.calls_ok, entry.attempts,
          entry.input_tokens + entry.output_tokens == tokens, flush=True)

async def main():
    async with gate:
        await gate.chat(USER("parent first"))  # a pooled keep-alive connection, a ledger entry
        pid = os.fork()
        if pid == 0:
            in_child(child)
        print("exit", await wait_for(pid))
        again = await gate.chat(USER("parent again"))
        stats = gate.stats()["sim"]
        print("parent", gate.ledger.entries["sim"].calls_ok, stats.in_flight,
              again.usage.input_tokens < 20, flush=True)

asyncio.run(main())
"""


def test_a_child_forked_with_the_gateway_open_makes_calls_with_a_ledger_of_its_own(
    server: tuple[str, SimEngine], tmp_path: Path
) -> None:
    """The parent opened the gateway and called through it, then forked. Before: every call
    in the child raised ``GateError`` ("open in the parent process when it forked"). Now the
    child's first call opens a fresh gateway on the child's loop (its own pools), a later
    loop opens it again; the child's ledger holds its three calls only (it starts empty, as
    a SyncGateway's child does — the parent's are the parent's), and the parent goes on with
    its own connection and ledger, reading its own answers."""
    base_url, engine = server
    lines = _run(OPEN_AND_USED, base_url, tmp_path=tmp_path)
    assert lines == ["child 3 3 True", "exit 0", "parent 2 0 True"]
    assert _prompts(engine) == [
        "child one", "child three", "child two", "parent again", "parent first",
    ]


IN_FLIGHT = COMMON + """
gate = gg.Gateway([gg.Backend(name="sim", base_url=sys.argv[1], model="m", concurrency=4)])

def child():
    # the first touch in the child: a fresh gateway, not open here yet — no backend state,
    # nothing in flight, an empty ledger
    print("child sees", gate.stats(), gate.ledger.entries["sim"].attempts, flush=True)
    answer = asyncio.run(gate.chat(USER("child call")))
    stats = gate.stats()["sim"]
    print("child", bool(answer.text), stats.calls, stats.in_flight,
          gate.ledger.entries["sim"].calls_ok, flush=True)

async def main():
    async with gate:
        async with gate.stream(USER("parent streaming")) as stream:
            parts = []
            async for delta in stream:
                parts.append(delta)
                if len(parts) == 1:  # the call is in flight: its permit held, its body unread
                    pid = os.fork()
                    if pid == 0:
                        in_child(child)
                    print("exit", await wait_for(pid))
        result = stream.result
        stats = gate.stats()["sim"]
        print("parent", "".join(parts) == result.text, result.usage.output_tokens > 1,
              stats.calls, stats.in_flight, gate.ledger.entries["sim"].calls_ok, flush=True)

asyncio.run(main())
"""


def test_a_fork_while_the_parent_has_a_call_in_flight(
    server: tuple[str, SimEngine], tmp_path: Path
) -> None:
    """The parent forks in the middle of reading a stream. The child sees none of it — no
    call in flight, nothing in its ledger — and its own call is answered; the parent's
    stream then reads on to its end on the parent's connection, counted once there, and the
    server answered the parent's prompt once."""
    base_url, engine = server
    lines = _run(IN_FLIGHT, base_url, tmp_path=tmp_path)
    assert lines == [
        "child sees {} 0", "child True 1 0 1", "exit 0", "parent True True 1 0 1",
    ]
    assert _prompts(engine) == ["child call", "parent streaming"]


SHARED = COMMON + """
import redis

url, ns = sys.argv[2], sys.argv[3]
gate = gg.Gateway(
    [gg.Backend(name="sim", base_url=sys.argv[1], model="m", concurrency=2)],
    # a lease far longer than the test (a permit left behind stays counted), and a budget
    # for Redis's answers a loaded machine meets (an outage would skip the close's releases)
    shared=gg.Shared(url, namespace=ns, lease_s=30.0, op_budget_s=1.0),
)
store = redis.Redis.from_url(url)

def permits():
    # the fleet's leases; not a reservation ("worker:~"), the 250 ms hold of a permit for a
    # process woken from the fleet's queue, which lapses by itself
    return sum(
        not member.endswith(b":~")
        for key in store.scan_iter(f"*{ns}*:permits") for member in store.zrange(key, 0, -1)
    )

def child():
    async def calls():
        return await asyncio.gather(gate.chat(USER("child a")), gate.chat(USER("child b")))
    answers = asyncio.run(calls())  # the fleet's 2 permits: the parent's 1 and the child's
    print("child", [bool(a.text) for a in answers], gate.ledger.entries["sim"].calls_ok,
          "redis", permits(), flush=True)  # closed at the loop's end: its permits given back

async def main():
    async with gate:
        await gate.chat(USER("parent first"))
        async with gate.stream(USER("parent streaming")) as stream:
            async for delta in stream:
                pid = os.fork()  # one permit of the fleet's two held by the parent here
                if pid == 0:
                    in_child(child)
                print("exit", await wait_for(pid))
                print("parent holds", gate.stats()["sim"].fleet.held, "redis", permits())
                break
        answers = await asyncio.gather(gate.chat(USER("parent c")), gate.chat(USER("parent d")))
        print("parent", [bool(a.text) for a in answers], flush=True)
    print("closed redis", permits(), flush=True)

asyncio.run(main())
"""


def test_with_shared_the_fork_leaks_no_fleet_permit(
    server: tuple[str, SimEngine], tmp_path: Path, redis_url: str
) -> None:
    """``shared=`` (a real redis-server), a fleet limit of 2, the parent holding one permit
    at the fork. The child gets its own fleet connection and worker: its two calls share the
    one free permit, and its close gives back its own permits — not the parent's, which
    Redis still counts (1) until the parent ends its stream. Nothing is left counted once
    both have closed (a permit released twice, or kept, would show here)."""
    base_url, engine = server
    ns = namespace()
    lines = _run(SHARED, base_url, redis_url, ns, tmp_path=tmp_path)
    assert lines == [
        "child [True, True] 2 redis 1", "exit 0", "parent holds 1 redis 1",
        "parent [True, True]", "closed redis 0",
    ], lines
    assert _prompts(engine) == [
        "child a", "child b", "parent c", "parent d", "parent first", "parent streaming",
    ]


def test_a_stream_opened_first_in_the_child_says_what_to_do(
    server: tuple[str, SimEngine], tmp_path: Path
) -> None:
    """``gate.stream`` is not awaited, so it cannot open the gateway in the child: a typed
    error saying how, and nothing sent; after an awaited call has opened it, it streams."""
    source = COMMON + """
gate = gg.Gateway([gg.Backend(name="sim", base_url=sys.argv[1], model="m")])

def child():
    async def body():
        try:
            gate.stream(USER("too early"))
        except gg.GateError as error:
            print("refused", type(error).__name__, "async with gate" in str(error), flush=True)
        await gate.chat(USER("opens it"))
        async with gate.stream(USER("then streams")) as stream:
            print("streamed", bool("".join([d async for d in stream])), flush=True)
    asyncio.run(body())

async def main():
    async with gate:
        await gate.chat(USER("parent"))
        pid = os.fork()
        if pid == 0:
            in_child(child)
        print("exit", await wait_for(pid))

asyncio.run(main())
"""
    base_url, engine = server
    lines = _run(source, base_url, tmp_path=tmp_path)
    assert lines == ["refused GatewayClosedError True", "streamed True", "exit 0"]
    assert _prompts(engine) == ["opens it", "parent", "then streams"]


LOOP_THREAD = """
import asyncio, os, sys, threading
import gptgate as gg

url, ns = sys.argv[2], sys.argv[3]
gate = gg.Gateway(
    [gg.Backend(name="sim", base_url=sys.argv[1], model="m", concurrency=2)],
    shared=gg.Shared(url, namespace=ns, lease_s=30.0, op_budget_s=1.0),
)
USER = lambda text: [{"role": "user", "content": text}]
# the app module's own loop, in a thread of its own (gunicorn --preload's master): open there
loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()
on_loop = lambda coroutine: asyncio.run_coroutine_threadsafe(coroutine, loop).result(10)
on_loop(gate.start())
on_loop(gate.chat(USER("parent first")))

pid = os.fork()
if pid == 0:  # the worker: no thread of the parent's here, and it exits the normal way
    answer = asyncio.run(gate.chat(USER("child")))
    print("child", bool(answer.text), gate.ledger.entries["sim"].calls_ok, flush=True)
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print("exit", os.waitstatus_to_exitcode(status), flush=True)
again = on_loop(gate.chat(USER("parent again")))
fleet = gate.stats()["sim"].fleet
print("parent", bool(again.text), gate.ledger.entries["sim"].calls_ok, fleet.state,
      fleet.outages, flush=True)
on_loop(gate.aclose())
"""


def test_a_worker_exiting_normally_leaves_the_parents_loop_thread_gateway_working(
    server: tuple[str, SimEngine], tmp_path: Path, redis_url: str
) -> None:
    """The parent's gateway is open on a loop its own thread runs (no loop in the forking
    thread), with ``shared=``; the worker calls through it on a loop of its own, then exits
    through the interpreter's normal shutdown (not ``os._exit``), which finalizes what is
    left. The parent's gateway goes on: its next call is answered through the fleet, which
    declared no outage (its Redis connection untouched by the child)."""
    base_url, engine = server
    lines = _run(LOOP_THREAD, base_url, redis_url, namespace(), tmp_path=tmp_path)
    assert lines == ["child True 1", "exit 0", "parent True 2 up 0"], lines
    assert _prompts(engine) == ["child", "parent again", "parent first"]
