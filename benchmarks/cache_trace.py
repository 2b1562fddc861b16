"""Per-call trace of one family draw's cache job (``benchmarks/family.py --only cache``).

Why: the cache judge prints one time and one hit rate per client; a time miss is only
explained by where the calls spent it. This runs the three clients of the judge (plain, hand
warm-up, gptgate) on one engine seed and records, per call, in the simulator: each arrival at
the server and its status (a refusal: 429/503), when it started on a replica, which replica,
the batch it met, its cached tokens, prefill and decode step, answer length and end; for
gptgate also when the call reached the cache gate and when the gate let it go. It prints a
summary per client — last start, last end, server queue waits, refusals, calls per replica
and the batch they met, the places of the cap left empty while calls were still unsent, the
calls that end the job — and, for gptgate, its calls' time at the cache gate and the calls
its spreading pacer held; ``--admissions`` writes each gptgate admission (time, group, in
flight, waiting, window, share, backend busy, limit, spreading, in order, released, the order
trial's phase, warm-up), ``--step`` prints calls running/sent over time. Issue 31, round 12
(docs/caching.md) used it; the engine's and the gate's methods are patched for the run only.

    python benchmarks/cache_trace.py --seed 1046 [--repeat K] [--csv out.csv] [--tail 8]
                                     [--step 1.0] [--admissions out.txt] [--only gate]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _strategies import Messages, job, run_gptgate, run_hand, run_naive
from family import REPEAT_SEED_STEP, Sizes, cap, draw

from gptgate import cache as gate_cache
from gptgate.sim import engine as sim_engine
from gptgate.sim import run_virtual
from gptgate.sim.ledger import prompt_label


@dataclass(slots=True)
class CallTrace:
    """One call of one client, in the simulator's virtual seconds from the job's start."""

    label: str
    gate_in: float | None = None
    gate_out: float | None = None
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    start: float | None = None
    replica: int = -1
    batch: int = 0
    cached: int = 0
    prompt: int = 0
    prefill_s: float = 0.0
    step_s: float = 0.0
    tokens: int = 0
    end: float | None = None


class Recorder:
    """Patches the engine (and the cache gate) for one run; ``calls`` keyed by label."""

    def __init__(self) -> None:
        self.calls: dict[str, CallTrace] = {}
        self.t0: float | None = None
        self._now: Callable[[], float] = lambda: 0.0
        self.busy: list[tuple[float, int]] = []  # (time, +1/-1) slot use at the server
        self.slots = 0
        self._jobs: dict[int, CallTrace] = {}
        self.gate_events: list[tuple[float, float, str | None]] = []
        #: gptgate's admissions: (t, group, in flight, waiting, window, share, backend busy,
        #: limit, spreading, in order, released, order trial phase, warm-up)
        self.admissions: list[tuple[Any, ...]] = []
        #: calls the spreading pacer held: (t, seconds)
        self.paced: list[tuple[float, float]] = []

    def _t(self) -> float:
        now = self._now()
        if self.t0 is None:
            self.t0 = now
        return now - self.t0

    def call(self, label: str) -> CallTrace:
        return self.calls.setdefault(label, CallTrace(label))

    def install(self) -> list[Callable[[], None]]:
        rec = self
        undo: list[Callable[[], None]] = []
        eng = sim_engine.SimEngine
        orig_chat, orig_start, orig_finish = eng._chat, eng._start, eng._finish

        async def chat(self: Any, headers: Any, body: bytes, base: Any, rid: str) -> Any:
            rec._now = self.clock.now
            rec.slots = self.profile.replicas * self.profile.slots
            chat_req = self._parse(body)
            label = prompt_label(chat_req.messages)
            t = rec._t()
            response = await orig_chat(self, headers, body, base, rid)
            rec.call(label).arrivals.append((t, response.status))
            return response

        def start(self: Any, chat_req: Any, body: bytes, replica: Any, *a: Any, **k: Any) -> Any:
            j = orig_start(self, chat_req, body, replica, *a, **k)
            c = rec.call(prompt_label(chat_req.messages))
            c.start, c.replica, c.batch = rec._t(), replica.index, replica.active
            c.cached, c.prompt, c.prefill_s = j.cached_tokens, j.prompt_tokens, j.prefill_s
            c.step_s, c.tokens = j.tok_s, j.tokens
            rec.busy.append((c.start, 1))
            rec._jobs[id(j)] = c
            return j

        def finish(self: Any, j: Any, outcome: Any, output: Any = None) -> None:
            c = rec._jobs.get(id(j))
            if c is not None and c.end is None and not j.finished:
                c.end = rec._t()
                rec.busy.append((c.end, -1))
            orig_finish(self, j, outcome, output)

        eng._chat, eng._start, eng._finish = chat, start, finish  # type: ignore[method-assign]
        undo.append(lambda: setattr(eng, "_chat", orig_chat))
        undo.append(lambda: setattr(eng, "_start", orig_start))
        undo.append(lambda: setattr(eng, "_finish", orig_finish))
        return undo


def traced(client: Callable[..., Any], profile: Any, items: list[Messages], c: int, seed: int,
           gate: bool) -> tuple[Any, Recorder]:
    rec = Recorder()
    undo = rec.install()
    if gate:
        orig_enter = gate_cache.CacheGate.enter

        async def enter(self: Any, backend: str, group: Any, policy: Any, limit: int) -> Any:
            # the label is not visible here: match in FIFO order of entry per group key
            t = rec._t()
            ticket = await orig_enter(self, backend, group, policy, limit)
            rec.gate_events.append((t, rec._t(), group.key if group is not None else None))
            return ticket

        orig_admit, orig_pace = gate_cache.CacheGate._admit, gate_cache.CacheGate._pace

        def admit(self: Any, state: Any) -> Any:
            ticket = orig_admit(self, state)
            now = self._clock.now()
            rec.admissions.append((
                rec._t(), state.key[:6], state.in_flight, state.waiting, state.window,
                list(state.share), self._busy.get(state.backend, 0),
                self._limits.get(state.backend), self._spreading(state.backend),
                self._in_order(state), state.released[0],
                self._order_trial.phase(state.backend, now), ticket.warmer,
            ))
            return ticket

        async def pace(self: Any, state: Any, ticket: Any) -> Any:
            t = rec._t()
            out = await orig_pace(self, state, ticket)
            if rec._t() > t:
                rec.paced.append((t, rec._t() - t))
            return out

        gate_cache.CacheGate.enter = enter  # type: ignore[method-assign]
        gate_cache.CacheGate._admit = admit  # type: ignore[method-assign]
        gate_cache.CacheGate._pace = pace  # type: ignore[method-assign]
        undo.append(lambda: setattr(gate_cache.CacheGate, "enter", orig_enter))
        undo.append(lambda: setattr(gate_cache.CacheGate, "_admit", orig_admit))
        undo.append(lambda: setattr(gate_cache.CacheGate, "_pace", orig_pace))
    try:
        run = run_virtual(client, profile, [items], c, seed)
    finally:
        for u in undo:
            u()
    return run, rec


def idle_while_waiting(rec: Recorder, waiting: list[tuple[float, float]], c: int) -> float:
    """Seconds × places of the cap ``c`` (or the server's slots, if fewer) left empty while
    at least one call of the job was not sent yet (``waiting``: each call's (0, its first
    arrival at the server)) — the job's calls are all known at its start, so a place left
    empty then is one no client needed to leave."""
    events: list[tuple[float, int, int]] = [(t, d, 0) for t, d in rec.busy]
    events += [(a, 1, 1) for a, b in waiting if b > a] + [(b, -1, 1) for a, b in waiting if b > a]
    events.sort()
    busy = wait = 0
    last = 0.0
    idle = 0.0
    for t, d, kind in events:
        if wait > 0:
            idle += max(0, min(rec.slots, c) - busy) * (t - last)
        last = t
        if kind == 0:
            busy += d
        else:
            wait += d
    return idle


def summary(name: str, run: Any, rec: Recorder, tail: int, cap_c: int, step: float) -> None:
    calls = [c for c in rec.calls.values() if c.start is not None]
    ends = sorted(calls, key=lambda c: c.end or 0.0)
    waits = [c.start - c.arrivals[-1][0] for c in calls if c.start is not None and c.arrivals]
    refused = sum(1 for c in rec.calls.values() for _, s in c.arrivals if s != 200)
    per: dict[int, list[int]] = {}
    for c in calls:
        per.setdefault(c.replica, []).append(c.batch)
    reps = " / ".join(
        f"{len(b)} ({statistics.fmean(b):.1f})" for _, b in sorted(per.items())
    )
    print(f"## {name}: {run.total_s:.1f} s, hits {run.hit:.1%}, {run.failed} failed, "
          f"{refused} refusals")
    print(f"   last start {max(c.start for c in calls):.1f} s, last end "
          f"{max(c.end or 0 for c in calls):.1f} s; server queue wait mean "
          f"{statistics.fmean(waits):.2f} s, max {max(waits):.2f} s")
    print(f"   calls per replica (mean batch met): {reps}")
    gate_waits = rec.gate_events
    if gate_waits:
        held = [b - a for a, b, _ in gate_waits]
        print(f"   at the cache gate: mean {statistics.fmean(held):.2f} s, max {max(held):.2f} s")
    if rec.paced:
        print(f"   paced calls: {len(rec.paced)}, {sum(p for _, p in rec.paced):.1f} s in all, "
              f"first at {rec.paced[0][0]:.2f} s, last at {rec.paced[-1][0]:.2f} s")
    firsts = [(0.0, c.arrivals[0][0]) for c in calls if c.arrivals]
    resent = [(c.arrivals[0][0], c.start) for c in calls if c.arrivals and c.start is not None]
    refused = [r for r in resent if r[1] > r[0] + 1e-9]
    print(f"   places idle (of min(cap, slots)) while calls were not sent yet: "
          f"{idle_while_waiting(rec, firsts, cap_c):.1f} s; while refused calls waited to be "
          f"resent: {idle_while_waiting(rec, refused, cap_c):.1f} s")
    if step:
        marks = []
        t = 0.0
        end = max(x.end or 0 for x in calls)
        while t < end:
            running = sum(1 for x in calls if x.start is not None and x.start <= t < (x.end or 0))
            sent = sum(1 for x in calls if x.arrivals and x.arrivals[0][0] <= t)
            marks.append(f"{t:.1f}:{running}/{sent}")
            t += step
        print("   running/sent by time: " + " ".join(marks))
    print(f"   the job's last {tail} ends: label start replica batch cached/prompt step tokens end")
    for c in ends[-tail:]:
        assert c.start is not None
        print(f"     {c.label[:14]:14} {c.start:7.2f} r{c.replica:<2} b{c.batch:<3} "
              f"{c.cached:5}/{c.prompt:<5} {c.step_s * 1000:6.1f} ms {c.tokens:5} "
              f"{(c.end or 0):7.2f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--repeat", type=int, default=0, help="the judge's k-th engine seed")
    ap.add_argument("--csv", help="write every call of every client here")
    ap.add_argument("--tail", type=int, default=6)
    ap.add_argument("--step", type=float, default=0.0, help="print calls running/sent every STEP s")
    ap.add_argument("--only", default="plain,hand,gate")
    ap.add_argument("--admissions", help="write gptgate's admissions here")
    args = ap.parse_args(argv)
    sizes = Sizes()
    d = draw(args.seed)
    items = job(sizes.cache_prompts, sizes.cache_calls, d.seed)
    c = cap(d.server, sizes.cache_c)
    seed = d.seed + REPEAT_SEED_STEP * args.repeat
    print(f"draw {args.seed} (engine seed {seed}), cap {c}: {d.server}")
    clients = {
        "plain": (run_naive, (sizes.plain_attempts, sizes.timeout_s), False),
        "hand": (run_hand, (sizes.plain_attempts, sizes.timeout_s), False),
        "gate": (run_gptgate, (), True),
    }
    rows: list[list[Any]] = []
    for name in args.only.split(","):
        client, extra, is_gate = clients[name]

        async def go(p: Any, jobs: Any, cc: int, s: int, _c: Any = client, _e: Any = extra) -> Any:
            if _c is run_gptgate:
                return await _c(p, jobs, cc, s, timeout=sizes.timeout_s)
            return await _c(p, jobs, cc, s, *_e)

        run, rec = traced(go, d.server, items, c, seed, is_gate)
        summary(name, run, rec, args.tail, c, args.step)
        if is_gate and args.admissions:
            with open(args.admissions, "w") as fh:
                for a in rec.admissions:
                    fh.write(" ".join(f"{x:.3f}" if isinstance(x, float) else str(x)
                                      for x in a) + "\n")
        for t in rec.calls.values():
            rows.append([name, t.label, t.arrivals[0][0] if t.arrivals else None,
                         len(t.arrivals), t.start, t.replica, t.batch, t.cached, t.prompt,
                         t.prefill_s, t.step_s, t.tokens, t.end])
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["client", "label", "first_arrival", "arrivals", "start", "replica",
                        "batch", "cached", "prompt", "prefill_s", "step_s", "tokens", "end"])
            w.writerows(rows)


if __name__ == "__main__":
    sys.exit(main())
