"""``gg.SyncGateway``: many plain threads, one limit — over real loopback HTTP.

The simulator is served by uvicorn on 127.0.0.1 and counts the requests it holds at once
(``peak_in_flight``): whatever the threads do, the server never sees more than the limit, every
call succeeds, and nothing is left in flight or queued afterwards.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.sim import SimBatches, SimBatchPlan, SimEngine, SimServer, get_profile

SCALE = 50.0
USER = [{"role": "user", "content": "Tell me about connection pools."}]
THREADS, CALLS = 32, 5
ROOT = Path(__file__).resolve().parent.parent


def serve(output_tokens_mean: int) -> Iterator[tuple[str, SimEngine]]:
    profile = get_profile("gpu").model_copy(update={
        "rpm": None, "tpm": None, "max_queue": None, "output_tokens_mean": output_tokens_mean,
    })
    sim = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=5)
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url, sim


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    yield from serve(40)


@pytest.fixture
def long_server() -> Iterator[tuple[str, SimEngine]]:
    """Answers as long as ``max_tokens`` allows: a call that holds its permit a while."""
    yield from serve(4000)


def backend(base_url: str, **options: Any) -> gg.Backend:
    settings: dict[str, Any] = {"concurrency": 4, "timeout": 60.0}
    settings.update(options)
    return gg.Backend(name="sim", base_url=base_url, model="m", **settings)


def sync_gate(base_url: str, **options: Any) -> gg.SyncGateway:
    return gg.SyncGateway([backend(base_url, **options)], clock=gg.ScaledClock(SCALE), seed=3)


def real_time_gate(base_url: str, **options: Any) -> gg.SyncGateway:
    """A gateway on real time while the server answers 50x fast: on the ScaledClock its 60 s
    attempt timeout is 1.2 s of wall time and its 30 s idle bound 0.6 s, which a loaded host
    that stalls a thread or the server's loop reaches (a call timed out and retried, an unread
    stream's permit let go) — for tests that count calls or hold permits, not time them."""
    return gg.SyncGateway([backend(base_url, **options)], seed=3)


def in_threads(work: Callable[[int], object], threads: int = THREADS) -> list[object]:
    """``work(i)`` in ``threads`` threads at once; every result, or the first error raised."""
    results: list[object] = [None] * threads
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as error:
            errors.append(error)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not any(w.is_alive() for w in workers), "a thread hung"
    if errors:
        raise errors[0]
    return results


def assert_idle(gate: gg.SyncGateway) -> None:
    stats = gate.stats()["sim"]
    assert (stats.in_flight, stats.queued, stats.pool.checked_out) == (0, 0, 0)


def until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``done`` (a state the loop's thread reaches soon) for up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.005)


def sync_threads_left() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("gptgate-sync")]


def test_32_threads_of_chat_share_one_limit(server: tuple[str, SimEngine]) -> None:
    base_url, sim = server
    with sync_gate(base_url) as gate:
        done = in_threads(lambda i: [gate.chat(USER, max_tokens=20).text for _ in range(CALLS)])
        assert all(all(texts) for texts in done)  # type: ignore[union-attr]
        assert_idle(gate)
        assert gate.stats()["sim"].calls == THREADS * CALLS
        entry = gate.ledger.entries["sim"]  # the tokens, as Gateway.ledger has them
    bill = sim.ledger.snapshot()
    assert bill.ok == THREADS * CALLS
    assert (entry.input_tokens, entry.output_tokens) == (bill.input_tokens, bill.output_tokens)
    assert 1 <= bill.peak_in_flight <= 4
    assert sync_threads_left() == []  # the loop's thread was joined


def test_32_threads_of_streams_share_one_limit(server: tuple[str, SimEngine]) -> None:
    base_url, sim = server

    def streams(i: int) -> bool:
        for _ in range(CALLS):
            with gate.stream(USER, max_tokens=20) as s:
                parts = list(s)
            assert len(parts) > 1 and "".join(parts) == s.result.text == s.text
            assert s.result.streamed and s.result.usage.output_tokens > 0
        return True

    with real_time_gate(base_url) as gate:
        assert all(in_threads(streams))
        assert_idle(gate)
    assert sim.ledger.snapshot().ok == THREADS * CALLS
    assert sim.ledger.snapshot().peak_in_flight <= 4


def test_32_threads_of_map_share_one_limit(server: tuple[str, SimEngine]) -> None:
    base_url, sim = server
    items = [{"messages": USER, "max_tokens": 10}] * CALLS
    with real_time_gate(base_url) as gate:
        results = in_threads(lambda i: gate.map(items, scenario="realtime_chat"))
        assert all(isinstance(r, gg.ChatResult) for rs in results for r in rs)  # type: ignore[attr-defined]
        assert_idle(gate)
    assert sim.ledger.snapshot().ok == THREADS * CALLS
    assert sim.ledger.snapshot().peak_in_flight <= 4


@pytest.mark.parametrize("stream", [False, True])
def test_the_sync_openai_sdk_on_http_client_is_governed(
    server: tuple[str, SimEngine], stream: bool
) -> None:
    base_url, sim = server
    # real time: on a ScaledClock the idle bound between a stream's chunks was a fraction of a
    # real second, which 32 threads on a loaded machine reached ("stream idle between chunks")
    with real_time_gate(base_url) as gate:
        client = openai.OpenAI(
            api_key="sk-test", base_url=base_url, http_client=gate.http_client("sim"),
            max_retries=0,
        )

        def ask(i: int) -> bool:
            for _ in range(CALLS):
                if stream:
                    chunks = client.chat.completions.create(
                        model="m", messages=USER, max_tokens=20, stream=True  # type: ignore[arg-type]
                    )
                    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                else:
                    answer = client.chat.completions.create(
                        model="m", messages=USER, max_tokens=20  # type: ignore[arg-type]
                    )
                    text = answer.choices[0].message.content or ""
                assert text
            return True

        assert all(in_threads(ask))
        assert_idle(gate)
        stats = gate.stats()["sim"]
    assert stats.calls == THREADS * CALLS and stats.output_tokens > 0  # billed as async is
    assert sim.ledger.snapshot().ok == THREADS * CALLS
    assert sim.ledger.snapshot().peak_in_flight <= 4


def test_a_sync_sdk_stream_left_early_hangs_up_and_gives_its_permit_back(
    server: tuple[str, SimEngine],
) -> None:
    base_url, _ = server
    with sync_gate(base_url, concurrency=1, abandon_grace_s=0.0) as gate:
        client = openai.OpenAI(
            api_key="sk-test", base_url=base_url, http_client=gate.http_client("sim"),
            max_retries=0,
        )
        for _ in range(3):  # with concurrency=1 a permit kept would hang the next one
            chunks = client.chat.completions.create(
                model="m", messages=USER, max_tokens=2000, stream=True  # type: ignore[arg-type]
            )
            next(iter(chunks))
            chunks.close()
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert_idle(gate)


def test_guard_on_a_sync_function_around_a_sync_sdk_with_its_own_client(
    server: tuple[str, SimEngine],
) -> None:
    base_url, sim = server
    with sync_gate(base_url, concurrency=8) as gate:
        own = openai.OpenAI(api_key="sk-test", base_url=base_url, max_retries=0)
        callers: set[int] = set()

        @gate.guard(scenario="realtime_chat", backend="sim")
        def answer(q: int) -> Any:
            callers.add(threading.get_ident())  # the function runs in the caller's thread
            return own.chat.completions.create(
                model="m", messages=USER, max_tokens=20  # type: ignore[arg-type]
            )

        with pytest.raises(TypeError, match="plain functions"):

            @gate.guard()
            async def not_sync() -> None: ...

        idents = in_threads(lambda i: [answer(i) and threading.get_ident() for _ in range(CALLS)])
        assert callers == {ids[0] for ids in idents}  # type: ignore[index]
        assert_idle(gate)
        stats = gate.stats()["sim"]
    assert stats.calls == THREADS * CALLS and stats.input_tokens > 0  # from the usage returned
    assert sim.ledger.snapshot().peak_in_flight <= 8


def test_guard_classifies_and_reraises_the_functions_own_exception(
    server: tuple[str, SimEngine],
) -> None:
    base_url, _ = server
    with sync_gate(base_url) as gate:
        tries: list[int] = []

        @gate.guard()
        def flaky() -> str:
            tries.append(1)
            if len(tries) == 1:  # a backend's 503, as the SDK raises it: retried
                raise openai.InternalServerError(
                    "down", response=_response(503), body=None
                )
            raise KeyError("the app's own bug")  # never retried, raised as it is

        with pytest.raises(KeyError, match="own bug"):
            flaky()
        assert len(tries) == 2
        assert_idle(gate)


def _response(status: int) -> Any:
    import httpx2

    return httpx2.Response(status, request=httpx2.Request("POST", "http://x/v1/chat"))


def test_guard_with_the_gateways_http_client_takes_one_permit_per_call(
    server: tuple[str, SimEngine],
) -> None:
    """The body's requests on ``gate.http_client`` run under the guard's permit: 8 threads
    holding the 4 permits would otherwise each wait for a fifth, for good."""
    base_url, sim = server
    with sync_gate(base_url) as gate:
        client = openai.OpenAI(
            api_key="sk-test", base_url=base_url, http_client=gate.http_client("sim"),
            max_retries=0,
        )

        @gate.guard(backend="sim")
        def answer() -> str:
            reply = client.chat.completions.create(
                model="m", messages=USER, max_tokens=20  # type: ignore[arg-type]
            )
            return reply.choices[0].message.content or ""

        assert all(in_threads(lambda i: answer(), threads=8))
        assert_idle(gate)
        assert gate.stats()["sim"].calls == 8
    assert sim.ledger.snapshot().requests == 8


def test_a_blocking_call_from_inside_a_running_loop(server: tuple[str, SimEngine]) -> None:
    """Jupyter, or async code calling sync code: the loop's thread blocks on the portal's own
    loop, which goes on."""
    base_url, _ = server
    with sync_gate(base_url) as gate:

        async def notebook_cell() -> tuple[str, str]:
            return gate.chat(USER, max_tokens=10).text, "".join(gate.stream(USER, max_tokens=10))

        plain, streamed = asyncio.run(notebook_cell())
        assert plain and streamed
        assert anyio.run(notebook_cell, backend="trio")[0]
        assert_idle(gate)


def test_a_call_from_the_gateways_own_loop_is_a_typed_error(
    server: tuple[str, SimEngine],
) -> None:
    base_url, _ = server
    with sync_gate(base_url) as gate:
        seen: list[BaseException] = []

        def on_result(index: int, outcome: object) -> None:
            try:
                gate.chat(USER)  # would wait for the loop it blocks
            except gg.GateError as error:
                seen.append(error)

        gate.map([{"messages": USER, "max_tokens": 5}], on_result=on_result)
        assert len(seen) == 1 and "sync_gate.gateway" in str(seen[0])


def test_use_after_close_is_a_typed_error(server: tuple[str, SimEngine]) -> None:
    base_url, _ = server
    gate = sync_gate(base_url)
    assert gate.chat(USER, max_tokens=5).text  # opens on first use
    client = gate.http_client("sim")
    gate.close()
    gate.close()  # idempotent
    for use in (
        lambda: gate.chat(USER), lambda: gate.map([]),
        lambda: client.post(base_url + "/chat/completions", json={}),
    ):
        with pytest.raises(gg.GatewayClosedError, match="SyncGateway is closed"):
            use()
    assert sync_threads_left() == []
    # the final figures stay readable, as an async Gateway's do after aclose
    final = gate.stats()["sim"]
    assert final.calls == 1 and final.in_flight == 0 and final.pool.checked_out == 0
    assert gate.snapshot()["backends"] and gate.budget_status() is None
    assert sync_threads_left() == []
    never_used = sync_gate(base_url)
    never_used.close()
    with pytest.raises(gg.GateError):
        never_used.chat(USER)


def test_bad_arguments_raise_the_gateways_typed_errors(server: tuple[str, SimEngine]) -> None:
    base_url, _ = server
    with sync_gate(base_url) as gate:
        with pytest.raises(gg.BadRequestError):
            gate.chat([])
        with pytest.raises(gg.BadRequestError):
            gate.stream(USER, accept=lambda r: True)
        with pytest.raises(gg.BadRequestError, match="unknown backend"):
            gate.http_client("nope")
    with pytest.raises(TypeError):
        gg.SyncGateway([backend(base_url)], gateway=gg.Gateway([backend(base_url)]))


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raising KeyboardInterrupt in the main thread, as in a terminal: a test run
    started as a background job of a non-interactive shell (``pytest &``, some CI runners)
    inherits SIGINT *ignored*, and Python then keeps it so — the test's Ctrl-C never came,
    its call waited for the holder's permit, and it failed with "DID NOT RAISE"."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_an_interrupted_caller_gives_its_place_back(
    long_server: tuple[str, SimEngine],
) -> None:
    """Ctrl-C (or a Celery soft time limit) in a thread waiting for a permit cancels its
    task: it neither stays queued nor ever takes the permit."""
    base_url, sim = long_server
    with sync_gate(base_url, concurrency=1) as gate:
        release = threading.Event()

        @gate.guard(backend="sim")
        def hold_the_permit() -> None:  # holds the one permit until released, however
            release.wait(30)  # loaded the machine (a long chat could end before we queued)

        holder = threading.Thread(target=hold_the_permit)
        holder.start()
        until(lambda: gate.stats()["sim"].in_flight >= 1)

        def interrupt_once_queued() -> None:
            until(lambda: gate.stats()["sim"].queued >= 1)
            # a real SIGINT (Ctrl-C): it wakes the main thread from its blocking wait
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

        threading.Thread(target=interrupt_once_queued).start()
        try:
            with pytest.raises(KeyboardInterrupt):
                # a deadline (simulated seconds): no stall bound, which at 50× the clock
                # is a few real seconds of a loaded machine
                gate.chat(USER, max_tokens=300, timeout=3000.0)
            assert gate.stats()["sim"].queued == 0
        finally:
            release.set()
            holder.join(30)
        assert gate.chat(USER, max_tokens=5).text  # the limit of 1 is free again
        assert_idle(gate)
    assert sim.ledger.snapshot().requests == 1  # the interrupted call was never sent


def test_a_caller_timeout_is_the_gateways_typed_error(
    long_server: tuple[str, SimEngine],
) -> None:
    base_url, _ = long_server
    with sync_gate(base_url, concurrency=1) as gate:
        with pytest.raises(gg.RequestTimeout):
            gate.chat(USER, max_tokens=4000, timeout=1.0, stream=False)
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert gate.chat(USER, max_tokens=5).text


@pytest.mark.parametrize("built", ["in the lifespan", "at import"])
def test_sync_worker_threads_drive_an_async_apps_open_gateway(
    server: tuple[str, SimEngine], built: str
) -> None:
    """FastAPI-style: the app opens its Gateway on its loop; 8 sync endpoints' worker threads
    go through that loop (one limit with the app's own async calls)."""
    base_url, sim = server
    # the gateway on real time (the server's answers stay 50× fast): on a ScaledClock its 60 s
    # attempt timeout was 1.2 real s, which a loaded machine reached: retried, 49 calls
    gate = gg.Gateway([backend(base_url)], seed=3)
    at_import = gg.SyncGateway(gateway=gate)  # not on any loop: found from a worker thread

    async def app() -> tuple[list[object], gg.GateError | None]:
        async with gate:
            sync_side = gg.SyncGateway(gateway=gate) if built == "in the lifespan" else at_import
            assert sync_side.gateway is gate  # usable from its own loop

            def endpoint() -> list[str]:  # a sync endpoint, run in a worker thread
                return [sync_side.chat(USER, max_tokens=20).text for _ in range(CALLS)]

            async with anyio.create_task_group() as tg:
                results: list[object] = []

                async def worker() -> None:
                    results.append(await anyio.to_thread.run_sync(endpoint))

                for _ in range(8):
                    tg.start_soon(worker)
                for _ in range(CALLS):  # the app's own async calls, same limit
                    tg.start_soon(lambda: gate.chat(USER, max_tokens=20))
            stats = gate.stats()["sim"]
            assert (stats.in_flight, stats.queued, stats.calls) == (0, 0, 9 * CALLS)
            foreign: gg.GateError | None = None
            try:
                await anyio.to_thread.run_sync(lambda: asyncio.run(_touch(sync_side)))
            except gg.GateError as error:
                foreign = error
            await anyio.to_thread.run_sync(sync_side.close)
            return results, foreign

    results, foreign = asyncio.run(app())
    assert len(results) == 8 and all(all(r) for r in results)  # type: ignore[attr-defined]
    assert foreign is not None and "SyncGateway(gateway=...)" in str(foreign)
    assert sim.ledger.snapshot().ok == 9 * CALLS
    assert sim.ledger.snapshot().peak_in_flight <= 4


async def _touch(sync_side: gg.SyncGateway) -> None:
    sync_side.gateway  # noqa: B018 - from another event loop: refused


def test_driving_an_app_gateway_from_a_thread_that_cannot_reach_its_loop(
    server: tuple[str, SimEngine],
) -> None:
    base_url, _ = server
    sync_side = gg.SyncGateway(gateway=gg.Gateway([backend(base_url)]))
    with pytest.raises(gg.GateError, match=r"SyncGateway\(gateway=...\) reaches"):
        sync_side.chat(USER)


FORK_SCRIPT = """
import os, sys, threading
import gptgate as gg

base_url = sys.argv[1]
# module level, as under gunicorn --preload: built (and used) in the parent before the fork
gate = gg.SyncGateway([gg.Backend(name="sim", base_url=base_url, model="m", concurrency=2)])
assert gate.chat([{"role": "user", "content": "parent"}], max_tokens=5).text
driven = []

pid = os.fork()
if pid == 0:
    try:
        ok = gate.chat([{"role": "user", "content": "child"}], max_tokens=5).text
        stats = gate.stats()["sim"]
        print("child", bool(ok), stats.calls, stats.in_flight, flush=True)
    finally:
        gate.close()
        os._exit(0)
_, status = os.waitpid(pid, 0)
print("parent again", bool(gate.chat([{"role": "user", "content": "p"}], max_tokens=5).text),
      os.waitstatus_to_exitcode(status), flush=True)
# never closed: interpreter exit closes it, with no thread left behind and no noise
"""


def run_script(source: str, base_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``source`` in a fresh interpreter (it forks): a hang fails at the timeout, not forever."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", str(script), base_url],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done


def test_fork_after_preload_style_creation_works_in_the_child(
    server: tuple[str, SimEngine], tmp_path: Path
) -> None:
    done = run_script(FORK_SCRIPT, server[0], tmp_path)
    # the child's gateway is a fresh one (its own pools and loop): one call, none in flight
    assert done.stdout.splitlines() == ["child True 1 0", "parent again True 0"]
    assert done.stderr == ""


DRIVEN_FORK_SCRIPT = """
import asyncio, os, sys
import gptgate as gg

async def main():
    gate = gg.Gateway([gg.Backend(name="sim", base_url=sys.argv[1], model="m")])
    async with gate:
        sync_side = gg.SyncGateway(gateway=gate)
        pid = os.fork()
        if pid == 0:
            try:
                sync_side.chat([{"role": "user", "content": "x"}])
            except gg.GateError as error:
                print("child", type(error).__name__, "after the fork" in str(error), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)

asyncio.run(main())
"""


def test_fork_of_a_driven_app_gateway_is_a_typed_error_in_the_child(
    server: tuple[str, SimEngine], tmp_path: Path
) -> None:
    done = run_script(DRIVEN_FORK_SCRIPT, server[0], tmp_path)
    assert done.stdout.splitlines() == ["child GateError True"]


def test_the_flask_example_under_a_threaded_wsgi_server_holds_the_limit() -> None:
    """examples/flask_app.py: 24 concurrent requests through werkzeug's threaded server, each
    request thread calling one SyncGateway(concurrency=4): one attempt each, none retried.

    Whatever the host's pace: only the simulator runs 20x fast; the gateway's idle and attempt
    timeouts are real seconds (on the scaled clock they were 1.5 s and 3 s of wall time, and a
    loaded host's stalled simulator thread made them time out and retry: 28 calls for 24)."""
    pytest.importorskip("flask")
    from examples.flask_app import LIMIT, drive

    answered, peak, stats = drive(24)
    assert answered == 24 and stats["in_flight"] == 0
    assert (stats["calls"], stats["retries"]) == (24, 0), stats
    assert 1 <= peak <= LIMIT


def test_a_stream_a_guarded_sync_function_returns_keeps_the_permit_until_read(
    server: tuple[str, SimEngine],
) -> None:
    base_url, sim = server
    # real time: the unread stream keeps the permit up to the backend's idle_timeout (30 s),
    # which the ScaledClock made 0.6 s of wall time — a stalled test thread lost it
    with real_time_gate(base_url, concurrency=1) as gate:
        own = openai.OpenAI(api_key="sk-test", base_url=base_url, max_retries=0)

        @gate.guard(backend="sim")
        def start_stream() -> Any:
            return own.chat.completions.create(
                model="m", messages=USER, max_tokens=20, stream=True  # type: ignore[arg-type]
            )

        first = start_stream()  # returned unread: it still holds the only permit
        assert gate.stats()["sim"].in_flight == 1
        second: list[Any] = []
        waiting = threading.Thread(target=lambda: second.append(start_stream()))
        waiting.start()
        until(lambda: gate.stats()["sim"].queued >= 1)
        assert gate.stats()["sim"].queued == 1 and not second  # waits for the first's end
        assert "".join(c.choices[0].delta.content or "" for c in first if c.choices)
        waiting.join(30)
        assert len(second) == 1
        second[0].close()  # closed unread: the permit comes back as well
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert_idle(gate)
    assert sim.ledger.snapshot().peak_in_flight == 1


def test_closing_under_calls_and_streams_in_flight_ends_them_with_a_typed_error(
    long_server: tuple[str, SimEngine],
) -> None:
    base_url, _ = long_server
    gate = sync_gate(base_url)
    seen: list[BaseException] = []

    def call() -> None:
        try:
            gate.chat(USER, max_tokens=2000)
        except BaseException as error:
            seen.append(error)

    def stream() -> None:
        try:
            with gate.stream(USER, max_tokens=2000) as s:
                for _ in s:
                    pass
        except BaseException as error:
            seen.append(error)

    workers = [threading.Thread(target=call), threading.Thread(target=stream)]
    for worker in workers:
        worker.start()
    until(lambda: gate.stats()["sim"].in_flight == 2)
    gate.close(grace_s=0.0)
    for worker in workers:
        worker.join(30)
    assert len(seen) == 2 and all(isinstance(e, gg.GateError) for e in seen), seen
    assert sync_threads_left() == []


class _CutMidStream(httpx2.SyncByteStream):
    """A response body the network cuts after its first event."""

    def __iter__(self) -> Iterator[bytes]:
        yield b'data: {"choices": []}\n\n'
        raise httpx2.ReadError("connection reset while reading the stream")


def test_a_returned_stream_cut_while_read_blames_the_backend_not_the_app(
    server: tuple[str, SimEngine],
) -> None:
    """A guarded sync function's returned stream that fails while the caller reads it is the
    backend's failure (classified as for an async guard), never retried (the caller holds the
    stream); the application's own error in a returned generator blames nothing."""
    base_url, _ = server

    def cut(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, stream=_CutMidStream())

    own = httpx2.Client(transport=httpx2.MockTransport(cut))
    with sync_gate(base_url, concurrency=1) as gate:

        @gate.guard(backend="sim")
        def start_stream() -> httpx2.Response:
            request = own.build_request("POST", f"{base_url}/chat/completions")
            return own.send(request, stream=True)

        @gate.guard(backend="sim")
        def own_generator() -> Iterator[int]:
            yield 1
            raise KeyError("the app's own bug")

        for _ in range(2):  # concurrency=1: a permit kept would hang the second
            response = start_stream()
            with pytest.raises(httpx2.ReadError):
                for _ in response.iter_bytes():
                    pass
        until(lambda: gate.stats()["sim"].failures == 2)
        stats = gate.stats()["sim"]
        assert (stats.calls, stats.failures, stats.retries) == (2, 2, 0)
        with pytest.raises(KeyError, match="own bug"):
            list(own_generator())
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert gate.stats()["sim"].failures == 2  # the app's bug blames no backend
        assert_idle(gate)


# -- batch ------------------------------------------------------------------------------------

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)


@pytest.fixture
def batch_server() -> Iterator[tuple[str, SimEngine, SimBatches]]:
    """The simulator's Batch API over loopback: a batch ends 50 s of its clock (1 s real)
    after its creation."""
    profile = get_profile("gpu").model_copy(update={"rpm": None, "tpm": None})
    sim = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=5)
    batches = SimBatches(sim, SimBatchPlan(complete_after_s=50.0)).attach()
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url, sim, batches


def _batch_items(n: int) -> list[dict[str, Any]]:
    """Prompts that grow with the index: a result's input tokens say which item it answers."""
    return [
        {"messages": [{"role": "user", "content": "word " * (4 * (i + 1))}], "max_tokens": 20}
        for i in range(n)
    ]


def test_a_batch_job_from_sync_threads_round_trips_billed_at_the_batch_price(
    batch_server: tuple[str, SimEngine, SimBatches], tmp_path: Path,
) -> None:
    base_url, sim, batches = batch_server
    items = _batch_items(40)
    with sync_gate(base_url, price=PRICE) as gate:
        job = gate.batch(items, backend="sim", job_dir=tmp_path / "job", poll_s=5.0)
        assert isinstance(job, gg.SyncBatchJob) and job.id.startswith("gptgate-")
        assert job.status == "validating" and job.counts == gg.BatchCounts(40, 0, 0)
        assert len(job.batch_ids) == 1 and not job.resumed
        # 4 threads wait for the same job while this one watches it: one result for all
        seen = in_threads(lambda i: job.wait(), threads=4)
        results = seen[0]
        assert all(r == results for r in seen), [(type(r[0]), r[0]) for r in seen]  # type: ignore[index]
        assert all(isinstance(r, gg.ChatResult) for r in results), results[:2]  # type: ignore[index]
        sizes = [r.usage.input_tokens for r in results]  # type: ignore[union-attr]
        assert sizes == sorted(sizes) and len(set(sizes)) == 40  # in input order
        assert job.status == "completed" and job.counts == gg.BatchCounts(40, 40, 0)
        assert job.refresh() == "completed"
        again = gate.batch(items, backend="sim", job_dir=tmp_path / "job", poll_s=5.0)
        assert again.resumed and again.id == job.id
        assert [r.text for r in again.wait()] == [r.text for r in results]  # type: ignore[union-attr]
        entry = gate.gateway.ledger.entries["sim"]
    assert (batches.creates, batches.uploads) == (1, 1)  # resumed: nothing sent twice
    assert entry.batch_requests == batches.billed_requests == 40
    billed = gg.Usage(
        input_tokens=batches.billed_input_tokens, output_tokens=batches.billed_output_tokens
    )
    assert entry.batch_cost_usd == pytest.approx(PRICE.cost(billed) * 0.5)
    assert sim.ledger.snapshot().requests == 0  # nothing went live


def test_a_batch_job_cancelled_from_another_thread_ends_its_waiter(
    batch_server: tuple[str, SimEngine, SimBatches], tmp_path: Path,
) -> None:
    base_url, _, batches = batch_server
    with sync_gate(base_url) as gate:
        job = gate.batch(_batch_items(20), backend="sim", job_dir=tmp_path, poll_s=5.0)
        waited: list[Any] = []
        waiter = threading.Thread(target=lambda: waited.append(job.wait()))
        waiter.start()
        job.cancel()
        assert job.status in ("cancelling", "cancelled")
        waiter.join(30)
        assert len(waited) == 1 and job.status == "cancelled"
        results = waited[0]
        assert len(results) == 20
        assert all(isinstance(r, (gg.ChatResult, gg.BatchCancelledError)) for r in results)
        assert any(isinstance(r, gg.BatchCancelledError) for r in results)
        with pytest.raises(gg.BadRequestError):
            gate.batch([], backend="sim", job_dir=tmp_path / "empty")
    assert batches.creates == 1


def test_threads_embedding_at_once_are_merged_into_few_requests(
    server: tuple[str, SimEngine],
) -> None:
    """SyncGateway.embed: 32 threads × 5 single texts come back right, in few requests."""
    from gptgate.sim.embeddings import vector_for

    base_url, sim = server
    gate = gg.SyncGateway(
        [backend(base_url, embedding_model="e")], clock=gg.ScaledClock(SCALE), seed=3,
        embed_window_s=0.05,
    )
    with gate:
        got = in_threads(lambda i: [gate.embed(f"text {i}.{k}") for k in range(CALLS)])
        one = gate.embed(["a", "b"])
        assert_idle(gate)
    dims = len(one[0])
    for i, vectors in enumerate(got):
        assert vectors == [vector_for(f"text {i}.{k}", dims) for k in range(CALLS)]
    assert one == [vector_for("a", dims), vector_for("b", dims)]
    requests = sim.ledger.snapshot().requests
    assert requests < THREADS * CALLS / 4  # merged: far fewer requests than texts
