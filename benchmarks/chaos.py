"""The chaos suite: every public verb at once, over real HTTP, against simulator processes that
fail in every way a backend does; then the gateway's promises checked one by one.

Three ``gptgate sim`` server processes (tpu, gpu, cpu): 5% 5xx, 2% connections reset before the
response, 2% bodies and streams cut mid-way, 1% malformed JSON bodies and SSE frames, 0.3% first
bytes that never come, 0.3% responses that never end, and a 3 s 429 storm every 25 s on gpu;
the tpu process SIGKILLed mid-run and restarted; ``chat``, ``stream``, ``map``, ``submit`` and
``@gate.guard`` around the openai SDK on ``gate.http_client`` arriving over time, SDK streams
left with ``break`` and never closed, guards returning streams of an SDK on its own HTTP
client, 10% of them cancelled at a random point; the gateway opened in one task and closed
from another while the last burst is in flight.
See gptgate/sim/chaos.py for the invariants.

    python benchmarks/chaos.py [--calls 10000] [--seeds 1,2,3] [--scale 5] [--duration 400]
                               [--redis-up-after 10|none]
"""

from __future__ import annotations

import argparse
import sys

from gptgate.sim.chaos import ChaosConfig, ChaosReport, run_chaos


def show(report: ChaosReport) -> None:
    c = report.config
    print(f"\n## seed {c.seed}: {report.started:,} calls, {c.burst} in the closing burst, "
          f"{report.wall_s:.0f} s wall")
    print("calls by outcome: " + ", ".join(f"{k} {v:,}" for k, v in report.outcomes.most_common()))
    for kind, counts in sorted(report.by_kind.items()):
        print(f"  {kind:7s} " + ", ".join(f"{k} {v:,}" for k, v in counts.most_common()))
    print("faults the servers answered: " + ", ".join(
        f"{k} {v:,}" for k, v in report.faults.most_common()
    ) + f"; requests {sum(report.server_requests.values()):,} "
        f"({', '.join(f'{k} {v:,}' for k, v in report.server_requests.items())})")
    print(f"attempts sent {report.attempts:,} ({report.attempts_in_storms:,} met a 429)")
    lags = sorted(lag for _, lag in report.loop_lag_s) or [0.0]
    print(f"event loop lateness (a 50 ms timer, real s): p50 {lags[len(lags) // 2]:.3f}, "
          f"p99 {lags[int(len(lags) * 0.99)]:.3f}, max {lags[-1]:.3f}")
    print()
    print("| invariant | verdict | figure |")
    print("|---|---|---|")
    for check in report.invariants():
        print(f"| {check.name} | {'pass' if check.ok else '**FAIL**'} | {check.detail} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--burst", type=int, default=1_000)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--scale", type=float, default=5.0, help="simulated seconds per second")
    parser.add_argument("--duration", type=float, default=400.0, help="simulated seconds")
    parser.add_argument(
        "--redis-up-after", default="10",
        help="shared= through a redis-server down at the start and started this many "
        "simulated seconds after the first call; 'none': no shared=",
    )
    args = parser.parse_args()
    command = " ".join(["python benchmarks/chaos.py", *sys.argv[1:]])
    print(f"$ {command}")
    failed = 0
    for seed in (int(s) for s in args.seeds.split(",")):
        config = ChaosConfig(
            calls=args.calls, burst=args.burst, seed=seed, time_scale=args.scale,
            duration_s=args.duration,
            redis_up_after_s=None if args.redis_up_after == "none" else float(args.redis_up_after),
        )
        report = run_chaos(config)
        show(report)
        failed += not report.ok
    print(f"\n{failed} of {len(args.seeds.split(','))} runs with a failed invariant")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
