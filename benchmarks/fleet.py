"""Many processes, one backend: W worker processes over one simulator server, with and without
``shared=`` (issue 15).

Each row starts a fresh ``gptgate sim serve``-like server (``SimProcess``, time-scaled) and W
worker *processes*, each running its share of one batch job through ``gate.map``. Rows:

- ``per-process auto``: today without ``shared=``, each process learns its own limit;
- ``shared= auto``: ``concurrency="auto"`` with ``shared=`` — one limit for the fleet, learned
  by a leader from every process's samples (docs/fleet.md "Fleet-wide auto");
- ``shared= fixed N`` for each fleet-wide limit N of the grid.

Servers (``--servers``): ``cap`` — the ``gpu`` profile with a hard connection cap (its 32
slots and no queue: a 33rd call at once is refused with 503); ``rate`` — the ``gpu`` profile
behind an RPM limit well below its capacity (429s with ``x-ratelimit-*`` headers); ``cache``
— the ``gpu`` profile with its prefix cache, the job over four long shared system prompts.

Every worker's gateway runs on the server's scaled clock (``ScaledClock``), so its timeouts,
pacing and limits read the server's latencies, retry-afters and rate-limit reset times in the
server's seconds. Columns: goodput (successes per real second), p99 latency (real seconds)
from each call's send (the job's queue at the gateway left out), 429s, 503s, billed tokens
per success and cache hit rate from the server's own ledger, failed calls, and the fleet's
real concurrency at the server (``peak``) against the fleet limit (for ``shared= auto``: the
highest limit the fleet was ever given; ``final`` is the one at the end, ``terms`` how many
times a worker took the lead: a leader that finishes its share and closes hands over, so a
few terms per run are normal). ``held`` (``shared=`` rows): the permits the fleet held over
its limit (the workers count theirs every 10 ms, the benchmark reads the limit from Redis),
averaged while every worker still had calls — a fleet that hands a released permit over late
keeps less of its limit busy; ``ops/call``: Redis scripts run per call (the server's own
count, background rounds included), ``wakes``: wake-up messages published per call.

Then ``--kill``: the ``shared= auto`` row again with worker 0 (the first leader, usually)
SIGKILLed ``--kill-after-s`` into the run — the survivors must lose no call, the dead worker's
permits must be back within ``lease_s`` (read from Redis), and another worker must lead within
``lease_s``. ``--restart-redis``: the ``shared= auto`` row with redis-server stopped (SIGKILL)
and restarted empty mid-run, down ``--redis-down-s``: no call may fail.
``--skew-s S``: only the ``shared= fixed N`` rows, with worker 0's wall clock S seconds ahead
(a host with its clock off): ``peak`` must stay within N — the fleet's leases are judged on
Redis's clock; on a release that judged them on each process's own, worker 0 swept the
others' live permits and the fleet passed its limit.

``FLEET_TRACE=1`` prints each leader's limit trace, as (real seconds since the job started,
limit), and its event counts (stderr) as it closes; also each attempt timeout (its bound
against the learned p99), each worker's retries and timeouts, and each row's server ledger
(its ``abandoned`` requests are the ones a worker hung up on).

    python benchmarks/fleet.py [--workers 4,8] [--calls 1200] [--levels 8,16,32,48]
                               [--servers cap,rate,cache] [--time-scale 20]
                               [--kill] [--restart-redis] [--repeat 3] [--skew-s 3600]

The yardstick is the best fixed limit that failed no call: one above a hard cap fails half
the job with 503s, and its successes per second of the shorter run can top the others'.
``--repeat N`` runs each cell's rows N times, seeds ``--seed`` to ``--seed + N - 1``, round
after round (so the machine's load drifts over all rows alike), and judges ``shared= auto``
by the medians: the fixed limit with the highest median goodput is the yardstick, and
``shared= auto``'s goodput over that limit's in the same round, median over the rounds, the
verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import multiprocessing
import os
import random
import signal
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import gptgate as gg
from gptgate.clock import ScaledClock
from gptgate.shared.server import RedisServer, redis_server
from gptgate.sim import SimProcess

LEASE_S = 2.0
#: how often the workers count the permits they hold, and the benchmark reads the limit
HELD_TICK_S = 0.01
#: Redis's budget per operation. The default (50 ms) is for a server with cores to spare; here
#: W workers, the simulator and redis-server share 2 cores, and a worker whose event loop is
#: late by more than the budget declares a (false) outage and admits on its local share while
#: the others still count in Redis — the fleet's peak then passes its limit. `--op-budget-s
#: 0.05` shows it; the table's `outages` column counts them.
OP_BUDGET_S = 0.5

#: the server variants: (simulator profile, overrides, job)
SERVERS: dict[str, tuple[str, dict[str, Any], str]] = {
    # a hard connection cap: 32 sequences at once, no queue (the 33rd gets a 503)
    "cap": ("gpu", {"max_queue": 0}, "plain"),
    # an RPM limit far below the server's capacity (~900/min at the simulator's clock):
    # 429s with x-ratelimit-* headers, not queueing, bound it
    "rate": ("gpu", {"rpm": 300, "queue_full_status": 429}, "plain"),
    # the prefix cache: the job runs over four long system prompts
    "cache": ("gpu", {}, "prefix"),
}


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    limit: int | None
    goodput: float
    p99_s: float
    rate_limited: int
    #: refused by the server otherwise (503: the connection cap, a full queue)
    refused: int
    failed: int
    tokens_per_success: float
    hit_rate: float
    peak: int
    outages: int
    final: int | None = None
    #: terms of leadership over the run, all workers (1: one leader throughout)
    terms: int | None = None
    #: the fleet's permits held over its limit, time-averaged while every worker still had
    #: calls to make (read from Redis every 10 ms; None without shared=)
    held_ratio: float | None = None
    #: Redis scripts run per call, and wake-up messages published per call (shared= rows)
    scripts_per_call: float | None = None
    wakes_per_call: float | None = None
    #: the failed calls' errors, by type
    errors: str = ""


def _words(rng: random.Random, count: int) -> str:
    vocabulary = ("brand", "voice", "tone", "clear", "short", "active", "customer", "product",
                  "never", "always", "style", "guide", "friendly", "precise", "sentence")
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def _items(job: str, index: int, calls: int, seed: int) -> list[dict[str, Any]]:
    """This worker's share of the job (its own items, the fleet's shared prompts)."""
    rng = random.Random(seed * 1000 + index)
    if job == "plain":
        return [
            {"messages": [{"role": "user", "content": f"worker {index} item {i}: summarise"}],
             "max_tokens": 120}
            for i in range(calls)
        ]
    shared = random.Random(seed)
    systems = [f"Style guide {k}: " + _words(shared, 1600) for k in range(4)]
    return [
        {"messages": [{"role": "system", "content": systems[i % 4]},
                      {"role": "user", "content": f"Product {index}.{i}: " + _words(rng, 40)}],
         "max_tokens": 120}
        for i in range(calls)
    ]


def _worker(
    base_url: str, shared_url: str | None, namespace: str, concurrency: int | str, calls: int,
    index: int, start_at: float, out: Any, op_budget_s: float, job: str, seed: int,
    time_scale: float, wall_offset_s: float = 0.0,
) -> None:
    asyncio.run(_work(base_url, shared_url, namespace, concurrency, calls, index, start_at, out,
                      op_budget_s, job, seed, time_scale, wall_offset_s))


async def _work(
    base_url: str, shared_url: str | None, namespace: str, concurrency: int | str, calls: int,
    index: int, start_at: float, out: Any, op_budget_s: float, job: str, seed: int,
    time_scale: float, wall_offset_s: float = 0.0,
) -> None:
    backend = gg.Backend(name="sim", base_url=base_url, model="m", concurrency=concurrency,
                         timeout=120.0, max_concurrency=128)
    shared = (
        gg.Shared(shared_url, namespace=namespace, lease_s=LEASE_S, op_budget_s=op_budget_s)
        if shared_url else None
    )
    items = _items(job, index, calls, seed)
    # the server's clock: its latencies, retry-afters and x-ratelimit reset times are in its
    # (scaled) seconds, so the gateway's timeouts, pacing and limits must run on them too
    clock = ScaledClock(time_scale)
    gate = gg.Gateway([backend], shared=shared, seed=index, clock=clock)
    if wall_offset_s:  # this process's wall clock runs ahead (--skew-s)
        gate._fleet_options = {"wall": lambda: time.time() + wall_offset_s}
    async with gate:
        fleet = gate._fleet
        out.put(("hello", index, fleet.worker_id if fleet is not None else None))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        started = clock.now()
        admission: Any = gate._states["sim"].limiter.admission
        held: dict[int, int] = {}

        async def count_held() -> None:
            # the permits this worker holds, on the fleet's 10 ms ticks (the benchmark sums
            # the workers' ticks): permits in use by calls, not those Redis still counts
            while hasattr(admission, "held"):
                held[round((time.time() - start_at) / HELD_TICK_S)] = len(admission.held)
                await asyncio.sleep(HELD_TICK_S)

        if os.environ.get("FLEET_TRACE"):
            timeouts = gate._states["sim"].attempt_timeouts
            observe = timeouts.observe_timeout

            def traced(timeout_s: float, expected: int | None = None,
                       inflight: int | None = None) -> None:
                print(f"worker {index} timeout at {(clock.now() - started) / time_scale:.2f} s: "
                      f"{timeout_s / time_scale:.3f} s real, expected {expected}, inflight "
                      f"{inflight} (learned at {timeouts._inflight:.1f}), p99/token "
                      f"{timeouts.per_token_quantile / time_scale * 1000:.2f} ms, "
                      f"p99 {timeouts.latency_quantile / time_scale:.3f} s", file=sys.stderr)
                observe(timeout_s, expected, inflight)

            timeouts.observe_timeout = traced  # type: ignore[method-assign]
        counting = asyncio.ensure_future(count_held())
        results = await gate.map(items)
        counting.cancel()
        if os.environ.get("FLEET_TRACE"):
            st = gate.stats()["sim"]
            if st.retries or st.timeouts:
                print(f"worker {index} {concurrency}: retries {st.retries}, timeouts {st.timeouts}",
                      file=sys.stderr)
        stats = gate.stats()["sim"].fleet
        outages = stats.outages if stats is not None else 0
        terms = getattr(admission, "terms", 0)
        highest = getattr(admission, "highest", None)
        final = getattr(admission, "fleet_limit", None)
        leader = getattr(admission, "leader", None)
        if leader is not None and os.environ.get("FLEET_TRACE"):
            # (real seconds since the job started, limit): when slow start ended, against
            # how long the run was
            trace = [(round((t - started) / time_scale, 2), limit)
                     for t, limit in leader.algorithm.trace]
            print(f"worker {index} led: fed {leader.fed}, stale {leader.stale}, "
                  f"{leader.algorithm.events}, job ended "
                  f"{(clock.now() - started) / time_scale:.2f} s, trace {trace[-40:]}",
                  file=sys.stderr)
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    latencies = [(r.latency_s - r.queue_s) / time_scale for r in ok]  # real seconds
    errors = [f"{type(r).__name__}: {r}"[:120] for r in results if not isinstance(r, gg.ChatResult)]
    # latency from the send: the job's own queue at the gateway is not the backend's doing
    out.put((
        "done", index, latencies, len(results) - len(ok),
        time.time(), outages, terms, highest, final, errors, held,
    ))


class _HeldSampler:
    """Reads the fleet's held permits and its limit from Redis every 10 ms, in a thread of the
    benchmark's own process: how much of its limit the fleet keeps busy. A permit that one
    worker released and another has not taken yet is a free slot the limit counts; before
    waiters were woken on a release, such a slot stayed free until the waiter's next poll."""

    def __init__(self, url: str, namespace: str, limit: int | None, start_at: float) -> None:
        self.url, self.namespace, self.limit, self.start_at = url, namespace, limit, start_at
        #: (wall time, held, limit)
        self.readings: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import redis

        client: Any = redis.Redis.from_url(self.url)
        time.sleep(max(0.0, self.start_at - time.time()))
        key: str | None = None
        try:
            while not self._stop.wait(0.01):
                if key is None:
                    found = client.keys(f"gptgate:{self.namespace}:*:permits")
                    if not found:
                        continue
                    key = found[0].decode()
                now_ms = time.time() * 1000
                held = int(client.zcount(key, now_ms, "+inf"))
                limit = self.limit
                if limit is None:
                    value = client.get(key.removesuffix(":permits") + ":auto")
                    if value is None:
                        continue
                    limit = int(value)
                self.readings.append((time.time(), held, limit))
        except Exception:  # a side reading (Redis restarted, say), never the row's result
            pass
        finally:
            client.close()

    def ratio(self, until: float, workers: list[dict[int, int]]) -> float | None:
        """The permits the workers held (their ticks summed) over the limit, both averaged
        over the readings before ``until`` (the first worker done: after it, the fleet runs
        out of calls, not of hand-overs)."""
        self._stop.set()
        self._thread.join(timeout=5)
        held = limit = 0
        for t, _, lim in self.readings:
            tick = round((t - self.start_at) / HELD_TICK_S)
            counts = [w.get(tick) for w in workers]
            if t >= until or any(c is None for c in counts):
                continue
            held += sum(c for c in counts if c is not None)
            limit += lim
        return held / limit if limit else None


def _commandstats(url: str) -> tuple[int, int]:
    """(scripts, PUBLISHes) the Redis server has run so far (its own INFO commandstats)."""
    import redis

    client: Any = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return (int(stats.get("cmdstat_evalsha", {}).get("calls", 0)),
            int(stats.get("cmdstat_publish", {}).get("calls", 0)))


def _run(
    args: argparse.Namespace, server_name: str, workers: int, concurrency: int | str,
    redis: RedisServer | None, kill: bool = False, restart: bool = False, skew_s: float = 0.0,
) -> tuple[Row, str]:
    """One row on a fresh server; ``kill``: SIGKILL worker 0 mid-run; ``restart``: stop
    redis-server mid-run and start it again, empty, ``--redis-down-s`` later."""
    profile, overrides, job = SERVERS[server_name]
    shared_url = redis.url if redis is not None else None
    namespace = f"fleet{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    note = ""
    ops_before = _commandstats(shared_url) if shared_url and not restart else None
    with SimProcess(profile, time_scale=args.time_scale, seed=args.seed, **overrides) as server:
        start_at = time.time() + 3.0 + 0.3 * workers  # every worker has started by then
        processes = [
            context.Process(target=_worker, args=(server.base_url, shared_url, namespace,
                                                   concurrency, args.calls // workers, i,
                                                   start_at, out, args.op_budget_s, job,
                                                   args.seed, args.time_scale,
                                                   skew_s if i == 0 else 0.0))
            for i in range(workers)
        ]
        for p in processes:
            p.start()
        sampler = (
            _HeldSampler(shared_url, namespace,
                         None if concurrency == "auto" else int(concurrency), start_at)
            if shared_url else None
        )
        hello = {}
        for _ in range(workers):
            _, index, worker_id = out.get(timeout=60)
            hello[index] = worker_id
        if kill:
            note = asyncio.run(_kill_and_watch(processes[0], hello[0], shared_url, namespace,
                                               start_at + args.kill_after_s))
        if restart:
            assert redis is not None
            time.sleep(max(0.0, start_at + args.kill_after_s - time.time()))
            redis.stop()
            time.sleep(args.redis_down_s)
            redis.start()
            note = f"redis-server down {args.redis_down_s:g} s, restarted empty"
        done = [out.get(timeout=600) for _ in range(workers - (1 if kill else 0))]
        for p in processes:
            p.join(timeout=30)
        ledger = server.ledger()
    latencies = sorted(x for d in done for x in d[2])
    failed = sum(d[3] for d in done)
    makespan = max(d[4] for d in done) - start_at
    ops = None
    if ops_before is not None:
        after = _commandstats(shared_url)  # type: ignore[arg-type]
        ops = [(b - a) / max(1, args.calls) for a, b in zip(ops_before, after, strict=True)]
    held_ratio = (
        sampler.ratio(min(d[4] for d in done), [d[10] for d in done])
        if sampler is not None else None
    )
    if sampler is not None and os.environ.get("FLEET_TRACE"):
        # each worker's mean permits held: a worker that holds none for long waits unserved
        means = [sum(d[10].values()) / max(1, len(d[10])) for d in sorted(done, key=lambda d: d[1])]
        print(f"{concurrency}: permits held per worker " + " ".join(f"{m:.1f}" for m in means),
              file=sys.stderr)
    if os.environ.get("FLEET_TRACE"):
        print(f"{concurrency}: server ledger {ledger}", file=sys.stderr)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else 0.0
    if concurrency == "auto":
        name = "shared= auto" if shared_url else "per-process auto"
        limit = max((d[7] for d in done if d[7] is not None), default=None)
        final = max((d[8] for d in done if d[8] is not None), default=None)
        terms = sum(d[6] for d in done) if shared_url else None
    else:
        name, limit, final, terms = f"shared= fixed {concurrency}", int(concurrency), None, None
    errors: dict[str, int] = {}
    for d in done:
        for e in d[9]:
            errors[e] = errors.get(e, 0) + 1
    row = Row(name, limit, len(latencies) / makespan, p99, ledger.rate_limited,
              ledger.server_errors, failed, ledger.billed_tokens / max(1, ledger.ok),
              ledger.cache_hit_rate, ledger.peak_in_flight, sum(d[5] for d in done), final,
              terms, held_ratio, ops[0] if ops else None, ops[1] if ops else None,
              "; ".join(f"{n}x {e}" for e, n in sorted(errors.items())[:3]))
    return row, note


async def _kill_and_watch(
    process: Any, worker_id: str | None, url: str | None, namespace: str, kill_at: float
) -> str:
    """SIGKILL the worker, then read Redis until none of its leases counts any more and (with
    ``concurrency="auto"``) another worker leads."""
    import redis.asyncio

    await asyncio.sleep(max(0.0, kill_at - time.time()))
    assert url is not None and worker_id is not None
    client: Any = redis.asyncio.Redis.from_url(url)
    keys = [k async for k in client.scan_iter(match=f"gptgate:{namespace}:*:permits")]
    leader_keys = [k async for k in client.scan_iter(match=f"gptgate:{namespace}:*:leader")]

    async def held() -> int:
        count = 0
        for key in keys:
            members = await client.zrangebyscore(key, time.time() * 1000, "+inf")
            count += sum(1 for m in members if m.decode().startswith(worker_id))
        return count

    async def leader() -> str | None:
        for key in leader_keys:
            value = await client.get(key)
            if value is not None:
                expiry, _, who = value.decode().partition("|")
                if float(expiry) > time.time() * 1000:
                    return who
        return None

    held_before, led_before = await held(), await leader() == worker_id
    os.kill(process.pid, signal.SIGKILL)
    killed = time.monotonic()
    back = taken = None
    while time.monotonic() - killed < 10 * LEASE_S and (back is None or taken is None):
        if back is None and await held() == 0:
            back = time.monotonic() - killed
        if taken is None:
            now = await leader()
            if now is not None and now != worker_id:
                taken = time.monotonic() - killed
        await asyncio.sleep(0.02)
    await client.aclose()
    ok = back is not None and back <= LEASE_S + 0.1
    note = (f"worker 0 SIGKILLed holding {held_before} permits: back after "
            f"{'never' if back is None else f'{back:.2f} s'} (lease_s {LEASE_S}) "
            f"[{'holds' if ok else 'MISS'}]")
    if leader_keys:
        lead_ok = taken is not None and (not led_before or taken <= LEASE_S + 0.2)
        note += (f"; it {'led' if led_before else 'followed'}: another worker leads after "
                 f"{'never' if taken is None else f'{taken:.2f} s'} "
                 f"[{'holds' if lead_ok else 'MISS'}]")
    return note


def _print(rows: list[Row]) -> None:
    print(f"{'row':<18} {'goodput/s':>9} {'p99 s':>6} {'429s':>5} {'503s':>5} {'failed':>6} "
          f"{'tok/ok':>6} {'hit':>5} {'peak/limit':>10} {'final':>5} {'terms':>5} "
          f"{'outages':>7} {'held':>5} {'ops/call':>8} {'wakes':>5}")
    for r in rows:
        peak = f"{r.peak}" + (f"/{r.limit}" if r.limit else "")
        print(f"{r.name:<18} {r.goodput:>9.1f} {r.p99_s:>6.2f} {r.rate_limited:>5} "
              f"{r.refused:>5} {r.failed:>6} {r.tokens_per_success:>6.1f} {r.hit_rate:>5.2f} "
              f"{peak:>10} {'' if r.final is None else r.final:>5} "
              f"{'' if r.terms is None else r.terms:>5} {r.outages:>7} "
              f"{'' if r.held_ratio is None else f'{r.held_ratio:.2f}':>5} "
              f"{'' if r.scripts_per_call is None else f'{r.scripts_per_call:.2f}':>8} "
              f"{'' if r.wakes_per_call is None else f'{r.wakes_per_call:.2f}':>5}")
        if r.errors:
            print(f"    failed: {r.errors}")


def _completing(fixed: list[Row]) -> list[Row]:
    """The fixed limits that may be the yardstick: those that failed no call (a limit above
    a hard cap fails half the job with 503s, and its successes per second of a shorter run
    can top the others'), or all of them if every one failed some."""
    return [r for r in fixed if not r.failed] or fixed


def _verdict(rows: list[Row], server: str, calls: int) -> None:
    fixed = [r for r in rows if r.name.startswith("shared= fixed")]
    auto = next(r for r in rows if r.name == "shared= auto")
    apart = next(r for r in rows if r.name == "per-process auto")
    best = max(_completing(fixed), key=lambda r: r.goodput)
    shared = [*fixed, auto]
    over = [r.name for r in shared if r.peak > (r.limit or 0)]
    ratio = auto.goodput / best.goodput
    failing = [r.name for r in fixed if r.failed]
    print(f"shared=: peak never above the fleet limit: "
          f"{'holds' if not over else 'MISS ' + ', '.join(over)}; shared= auto 0 failed: "
          f"{'holds' if auto.failed == 0 else 'MISS'}"
          + (f" (fixed limits that failed calls: {', '.join(failing)})" if failing else ""))
    print(f"shared= auto: goodput {ratio:.2f}x of the best fixed fleet-wide limit without failures "
          f"({best.limit}) [{'holds' if ratio >= 0.95 else 'MISS'} >= 0.95], p99 "
          f"{auto.p99_s / best.p99_s:.2f}x; per-process auto: goodput "
          f"{apart.goodput / best.goodput:.2f}x, peak {apart.peak} in flight")
    if server == "rate":
        share = auto.rate_limited / calls
        print(f"shared= auto: 429s {auto.rate_limited} = {share:.1%} of calls "
              f"[{'holds' if share <= 0.01 else 'MISS'} <= 1%]")


def _median_verdict(rounds: list[list[Row]], seed: int) -> None:
    """Over several rounds: the best fixed limit is the one with the highest median goodput
    (of those that failed no call in any round), and ``shared= auto`` is judged by the median
    of its goodput over that limit's *in the same round* — rows of one round ran a minute
    apart, rounds several minutes apart on a machine whose speed drifts. One round's own best
    fixed limit is the highest of several noisy rows (±0.1 on a loaded 2-core box), a bar
    biased upwards; the level chosen over all rounds is not."""
    names = [r.name for r in rounds[0]]
    median = {
        name: statistics.median(r.goodput for rows in rounds for r in rows if r.name == name)
        for name in names
    }
    failing = {r.name for rows in rounds for r in rows if r.failed}
    fixed = [n for n in names if n.startswith("shared= fixed")]
    best = max([n for n in fixed if n not in failing] or fixed, key=median.__getitem__)

    def goodput(rows: list[Row], name: str) -> float:
        return next(r.goodput for r in rows if r.name == name)

    paired = [goodput(rows, "shared= auto") / goodput(rows, best) for rows in rounds]
    ratio = statistics.median(paired)
    level = best.removeprefix("shared= fixed ")
    print(f"median over {len(rounds)} rounds (seeds {seed}-{seed + len(rounds) - 1}), "
          "goodput/s: " + ", ".join(f"{n.removeprefix('shared= ')} {median[n]:.1f}" for n in names))
    print(f"shared= auto: goodput over fixed {level}'s in the same round "
          f"{', '.join(f'{x:.2f}' for x in paired)}x, median {ratio:.2f}x "
          f"[{'holds' if ratio >= 0.95 else 'MISS'} >= 0.95]; medians' ratio "
          f"{median['shared= auto'] / median[best]:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="4,8")
    parser.add_argument("--calls", type=int, default=1200)
    parser.add_argument("--levels", default="8,16,32,48")
    parser.add_argument("--servers", default="cap,rate,cache")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of the rows per cell, seeds --seed, --seed + 1, ...: "
                             "the verdict then compares medians")
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--restart-redis", action="store_true")
    parser.add_argument("--kill-after-s", type=float, default=1.0)
    parser.add_argument("--redis-down-s", type=float, default=1.0)
    parser.add_argument("--op-budget-s", type=float, default=OP_BUDGET_S)
    parser.add_argument("--skew-s", type=float, default=0.0,
                        help="only the fixed rows, worker 0's wall clock this far ahead")
    args = parser.parse_args()

    print("$ python benchmarks/fleet.py " + " ".join(sys.argv[1:]))
    levels = [int(x) for x in args.levels.split(",")]
    with redis_server() as redis:
        for server in args.servers.split(","):
            if server not in SERVERS:
                parser.error(f"unknown server {server!r}; known: {', '.join(SERVERS)}")
            profile, overrides, job = SERVERS[server]
            for workers in (int(w) for w in args.workers.split(",")):
                print(f"\n{server} ({profile} {overrides or ''}, {job} job), {workers} worker "
                      f"processes, {args.calls} calls, time scale {args.time_scale}")
                if args.skew_s:
                    for k in range(args.repeat):
                        seeded = copy.copy(args)
                        seeded.seed = args.seed + k
                        for level in levels:
                            row, _ = _run(seeded, server, workers, level, redis,
                                          skew_s=args.skew_s)
                            print(f"--skew-s {args.skew_s:g} (worker 0 ahead), seed "
                                  f"{seeded.seed}, {row.name}: peak {row.peak}/{level} "
                                  f"[{'holds' if row.peak <= level else 'PASSED'}], goodput "
                                  f"{row.goodput:.1f}/s, failed {row.failed}, outages "
                                  f"{row.outages}")
                    continue
                rounds = []
                for k in range(args.repeat):
                    seeded = copy.copy(args)
                    seeded.seed = args.seed + k
                    rows = [_run(seeded, server, workers, "auto", None)[0],
                            _run(seeded, server, workers, "auto", redis)[0]]
                    rows += [_run(seeded, server, workers, level, redis)[0] for level in levels]
                    if args.repeat > 1:
                        print(f"round {k + 1}, seed {seeded.seed}:")
                    _print(rows)
                    _verdict(rows, server, args.calls)
                    rounds.append(rows)
                if args.repeat > 1:
                    _median_verdict(rounds, args.seed)
                if args.kill:
                    row, note = _run(args, server, workers, "auto", redis, kill=True)
                    print(f"--kill at {args.kill_after_s} s, shared= auto: survivors failed "
                          f"{row.failed} [{'holds' if row.failed == 0 else 'MISS'}], peak "
                          f"{row.peak}/{row.limit}; {note}")
                    if row.errors:
                        print(f"    failed: {row.errors}")
                if args.restart_redis:
                    row, note = _run(args, server, workers, "auto", redis, restart=True)
                    print(f"--restart-redis at {args.kill_after_s} s, shared= auto: failed "
                          f"{row.failed} [{'holds' if row.failed == 0 else 'MISS'}], peak "
                          f"{row.peak}/{row.limit}, outages {row.outages}, goodput "
                          f"{row.goodput:.1f}/s; {note}")
                    if row.errors:
                        print(f"    failed: {row.errors}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
