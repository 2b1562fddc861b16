"""Soak: 100,000 ``gate.map`` calls, 10,000 ``gate.stream`` calls and 10,000 openai-SDK calls
on ``gate.http_client`` in ONE process and one gateway — memory and CPU per call stay flat.

``benchmarks/scale.py`` measures each size in a fresh process; a leak shows only when the same
gateway keeps serving. Phases, against the in-process simulator on a ``ScaledClock``:

1. ``map``: blocks of ``gate.map`` over a generator (each block's result list is counted and
   dropped: what the caller keeps is not the gateway's memory), sampled after each block;
2. ``stream``: ``gate.stream`` calls read to the end by ``--concurrency`` workers;
3. ``sdk``: ``openai.AsyncOpenAI`` on ``gate.http_client``, streamed and not, alternating;
4. ``sdk-loop`` (``--loopback``): the same SDK calls over real HTTP to a ``SimProcess``.

At each sample: current RSS, its change since the phase's first sample, the Python heap's
live blocks (``sys.getallocatedblocks`` after a full GC — exact where RSS is coarse) and the
CPU ms/call of the block just run. Verdicts per phase (issue 12): RSS at the end ≤ 1.1× the
first sample's; CPU/call of the last block within 1.25× of the first block's.

Time-scaled clocks turn any wall-clock pause into simulated seconds: at scale 2000 a stream's
60-second read timeout is 30 ms of wall time, which a full garbage collection (one stream in
10,000 was cut: gone with ``gc.disable()``) or a busy neighbour on a shared machine exceeds.
Backends here get ``timeout=`` ``TIMEOUT_S`` (10 minutes: 1.2 s of wall time at scale 500) so
that the soak measures memory and CPU, not the machine's scheduling.

    python benchmarks/soak.py [--map 100000] [--map-block 20000] [--streams 10000]
                              [--sdk 10000] [--block 2000] [--concurrency 64]
                              [--time-scale 500] [--loopback]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gptgate as gg
from gptgate.sim import SimEngine, SimTransport, get_profile

#: the in-process simulator: no rate limits, ample slots, short answers (load the client)
PROFILE: dict[str, Any] = dict(
    name="soak", slots=4096, max_queue=None, rpm=None, tpm=None,
    jitter_sigma=0.0, load_jitter_sigma=0.0, overload_error_rate=0.0,
    output_tokens_mean=20, output_tokens_sigma=0.0,
)
SYSTEM = {"role": "system", "content": "You summarise support tickets in one line."}
#: the backends' timeout, in simulated seconds (see the module docstring)
TIMEOUT_S = 600.0
RSS_RATIO = 1.1
CPU_RATIO = 1.25
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: the current phase's failed calls by error (type: message), printed under its table
FAILURES: Counter[str] = Counter()


def failure(error: BaseException | str) -> None:
    FAILURES[error if isinstance(error, str) else f"{type(error).__name__}: {error}"] += 1


def messages(i: int) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": f"Ticket {i}: printer jams."}]


def items(start: int, n: int) -> Iterator[dict[str, Any]]:
    """A generator: map must not need the whole input in memory."""
    for i in range(start, start + n):
        yield {"messages": messages(i), "max_tokens": 30}


def rss_mb() -> float:
    """The current resident set (not the peak: a leak is memory that stays)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


@dataclass(frozen=True, slots=True)
class Sample:
    calls: int
    failed: int
    rss_mb: float
    blocks: int
    cpu_ms_per_call: float


def sample(calls: int, failed: int, block_calls: int, block_cpu_s: float) -> Sample:
    gc.collect()
    return Sample(calls, failed, rss_mb(), sys.getallocatedblocks(),
                  block_cpu_s / block_calls * 1e3)


Block = Callable[[int, int], Awaitable[int]]  # (first index, calls) -> failures


async def soak(block: Block, total: int, size: int, warmup: int) -> list[Sample]:
    """Run ``total`` calls in blocks of ``size``, sampling after each. The ``warmup`` calls
    before are not counted: imports, connections, the limit's slow start and the bounded
    windows filling up are not growth."""
    samples: list[Sample] = []
    if warmup:
        await block(-warmup, warmup)
    FAILURES.clear()
    done = failed = 0
    while done < total:
        n = min(size, total - done)
        cpu = time.process_time()
        failed += await block(done, n)
        cpu = time.process_time() - cpu
        done += n
        samples.append(sample(done, failed, n, cpu))
    return samples


async def workers(concurrency: int, start: int, n: int, call: Callable[[int], Awaitable[bool]]
                  ) -> int:
    """``n`` calls on ``concurrency`` closed-loop workers; returns how many failed."""
    next_index, failed = start, 0

    async def worker() -> None:
        nonlocal next_index, failed
        while next_index < start + n:
            i, next_index = next_index, next_index + 1
            try:
                ok = await call(i)
            except Exception as error:  # the SDK raises its own types
                failure(error)
                ok = False
            else:
                if not ok:
                    failure("empty answer")
            failed += not ok
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return failed


def map_block(gate: gg.Gateway) -> Block:
    async def block(start: int, n: int) -> int:
        results = await gate.map(items(start, n))
        errors = [r for r in results if not isinstance(r, gg.ChatResult)]
        for error in errors:
            failure(error)
        return len(errors)
    return block


def stream_block(gate: gg.Gateway, concurrency: int) -> Block:
    async def call(i: int) -> bool:
        async with gate.stream(messages(i), max_tokens=30) as s:
            async for _ in s:
                pass
        return bool(s.result.text)

    async def block(start: int, n: int) -> int:
        return await workers(concurrency, start, n, call)
    return block


def sdk_block(client: Any, concurrency: int) -> Block:
    """The official openai SDK; even calls streamed, odd ones not."""
    async def call(i: int) -> bool:
        if i % 2:
            response = await client.chat.completions.create(
                model="m", messages=messages(i), max_tokens=30)
            return bool(response.choices[0].message.content)
        parts = []
        stream = await client.chat.completions.create(
            model="m", messages=messages(i), max_tokens=30, stream=True)
        async with stream:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
        return bool(parts)

    async def block(start: int, n: int) -> int:
        return await workers(concurrency, start, n, call)
    return block


@asynccontextmanager
async def sdk_client(gate: gg.Gateway, backend: str, base_url: str) -> AsyncIterator[Any]:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-soak",
                                http_client=gate.http_client(backend), max_retries=0)
    try:
        yield client
    finally:
        await client.close()


def report(phase: str, samples: list[Sample]) -> bool:
    first, last = samples[0], samples[-1]
    print(f"\n{phase}")
    print(f"{'calls':>8} {'failed':>7} {'RSS MB':>8} {'ΔRSS MB':>8} {'Δ heap blocks':>14} "
          f"{'CPU ms/call':>12}")
    print("-" * 62)
    for s in samples:
        print(f"{s.calls:>8} {s.failed:>7} {s.rss_mb:>8.1f} {s.rss_mb - first.rss_mb:>+8.1f} "
              f"{s.blocks - first.blocks:>+14,} {s.cpu_ms_per_call:>12.3f}")
    for what, count in FAILURES.most_common(5):
        print(f"failed ×{count}: {what}")
    FAILURES.clear()
    rss = last.rss_mb / first.rss_mb
    cpu = last.cpu_ms_per_call / first.cpu_ms_per_call
    ok_rss, ok_cpu = rss <= RSS_RATIO, cpu <= CPU_RATIO
    print(f"RSS after {last.calls:,} ≤ {RSS_RATIO}× after {first.calls:,}: {rss:.3f}× "
          f"{'PASS' if ok_rss else 'FAIL'}")
    print(f"CPU/call of the last block within {CPU_RATIO}× of the first: {cpu:.2f}× "
          f"{'PASS' if ok_cpu else 'FAIL'}")
    return ok_rss and ok_cpu and last.failed == 0


def idle_check(gate: gg.Gateway) -> list[str]:
    """The gateway's per-call structures, back at idle (what tests/test_soak.py asserts)."""
    problems = []
    for name, st in gate.stats().items():
        if st.in_flight or st.queued or st.cache_waiting or st.pool.checked_out:
            problems.append(f"{name}: in flight {st.in_flight}, queued {st.queued}, "
                            f"cache waiting {st.cache_waiting}, pool in use {st.pool.checked_out}")
    if len(gate._calls):
        problems.append(f"{len(gate._calls)} calls still registered")
    return problems


async def run(args: argparse.Namespace) -> bool:
    clock = gg.ScaledClock(args.time_scale)
    profile = get_profile("gpu").model_copy(update=PROFILE)
    engine = SimEngine(profile, clock=clock, seed=3)
    backend = gg.Backend(name="sim", base_url="http://127.0.0.1:8000/v1", model="m",
                         concurrency=args.concurrency, timeout=TIMEOUT_S,
                         transport=SimTransport(engine))
    ok = True
    async with gg.Gateway([backend], clock=clock) as gate:
        phases: list[tuple[str, Block, int, int]] = [
            (f"gate.map, blocks of {args.map_block:,}", map_block(gate), args.map, args.map_block),
            ("gate.stream", stream_block(gate, args.concurrency), args.streams, args.block),
        ]
        for title, block, total, size in phases:
            if total:
                ok &= report(title, await soak(block, total, size, args.warmup))
        if args.sdk:
            async with sdk_client(gate, "sim", backend.base_url) as client:
                samples = await soak(sdk_block(client, args.concurrency), args.sdk, args.block,
                                 args.warmup)
            ok &= report("openai SDK on gate.http_client (in-process sim; half streamed)", samples)
        problems = idle_check(gate)
    if args.loopback and args.sdk:
        ok &= await loopback(args)
    for problem in problems:
        print(f"NOT IDLE: {problem}")
    return ok and not problems


async def loopback(args: argparse.Namespace) -> bool:
    """The SDK path over real loopback HTTP: a simulator in its own process."""
    from _loopback import BENCH_PROFILE

    from gptgate.sim import SimProcess

    overrides = {**BENCH_PROFILE, "output_tokens_mean": 20}
    with SimProcess("gpu", time_scale=args.time_scale, seed=3, **overrides) as server:
        backend = gg.Backend(name="loop", base_url=server.base_url, model="m",
                             concurrency=args.concurrency, timeout=TIMEOUT_S / args.time_scale)
        async with gg.Gateway([backend]) as gate, \
                sdk_client(gate, "loop", server.base_url) as client:
            samples = await soak(sdk_block(client, args.concurrency), args.sdk, args.block,
                                 args.warmup)
            problems = idle_check(gate)
    ok = report("openai SDK on gate.http_client (loopback SimProcess; half streamed)", samples)
    for problem in problems:
        print(f"NOT IDLE: {problem}")
    return ok and not problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--map", type=int, default=100_000)
    parser.add_argument("--map-block", type=int, default=20_000)
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--sdk", type=int, default=10_000)
    parser.add_argument("--block", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--time-scale", type=float, default=500.0)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--loopback", action="store_true")
    args = parser.parse_args()
    print(f"$ python benchmarks/soak.py --map {args.map} --map-block {args.map_block} "
          f"--streams {args.streams} --sdk {args.sdk} --block {args.block} "
          f"--concurrency {args.concurrency} --time-scale {args.time_scale:g} "
          f"--warmup {args.warmup}"
          + (" --loopback" if args.loopback else ""))
    print(f"one process, one gateway; in-process simulator on ScaledClock({args.time_scale:g}); "
          "CPU counts client + simulator\n"
          f"each phase starts with {args.warmup:,} uncounted warm-up calls; RSS is the current "
          "resident set;\nΔ heap blocks: sys.getallocatedblocks() after gc.collect(), vs the "
          "phase's first sample")
    wall = time.perf_counter()
    ok = anyio.run(run, args)
    print(f"\n{'all phases PASS' if ok else 'SOME PHASE FAILS'} "
          f"(wall {time.perf_counter() - wall:.0f} s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
