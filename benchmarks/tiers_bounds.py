"""What the family's ``tiers`` rule can and cannot ask of a draw (docs/tiers.md).

    python benchmarks/tiers_bounds.py SEED [SEED ...] [--jitter 4]

Two bounds per draw, neither a policy:

* **success**: the best success any escalation policy reaches when a small answer cut at the
  call's own ``max_tokens`` says nothing beyond its cap — an oracle that knows, per cap, how
  many of the cut answers are a hard request's ramble, and escalates the caps where that
  saves most per escalation in vain, up to the ``tiers in vain`` rule (2 % of the calls).
  Expected counts in the judge's own terms (``_tiers.expected_wrong``); "uniform" spends the
  same 2 % over every cut answer alike, as a policy that cannot tell the caps apart must.
* **cost**: everything-large against itself, the same calls and arrivals, only the large
  server's jitter and straggler draws changed (``--jitter`` runs): how far apart two runs of
  the same policy land. Where the best policy is everything-large (a small model that fills
  every cap next to a large one that finishes), "cost ≤ 1×" is decided inside that spread.
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Sequence

import _tiers
import family

from gptgate.sim import engine as sim_engine
from gptgate.sim import run_virtual
from gptgate.tiers import TierHeuristic

#: the ``tiers in vain`` rule: escalations that changed nothing ≤ 2 % of 600 calls
IN_VAIN = 12.0


def success_bound(seed: int, calls: int = 600) -> str:
    d = family.draw(seed)
    small, large, r = d.small, d.server, d.small.hard_failure_rate
    classify = TierHeuristic()
    # per cap: cut answers, expected wrong among them if kept, in vain if all escalated
    caps: dict[int, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    silent = 0.0  # complete answers wrong with nothing to show: no escalation sees them
    for item in _tiers.workload(calls, 0.3, seed):
        if classify(item.messages, item.params)[0] != "small":
            continue
        cap = int(item.params["max_tokens"])
        c, cut_large = _tiers.natural_cut(small, cap), _tiers.natural_cut(large, cap)
        row = caps[cap]
        if not item.hard:
            row[0] += c
            row[2] += c * cut_large
            continue
        cut = 0.45 * r + 0.1 * r * c + (1 - r) * c
        row[0] += cut
        row[1] += 0.45 * r * (1 - cut_large) + 0.1 * r * c
        row[2] += cut * cut_large
        silent += 0.1 * r * (1 - c)
    wrong = sum(row[1] for row in caps.values())
    vain = sum(row[2] for row in caps.values())
    room, saved = IN_VAIN, 0.0
    for _, (_, saves, wastes) in sorted(
        caps.items(), key=lambda kv: -(kv[1][1] / kv[1][2] if kv[1][2] else float("inf"))
    ):
        share = 1.0 if wastes <= room else room / wastes
        saved += share * saves
        room -= share * wastes
    uniform = wrong * min(1.0, IN_VAIN / vain) if vain else wrong

    def ratio(left: float) -> str:
        return f"{(calls - left) / calls:.3f}×"

    return (
        f"success: silent {silent:.1f}, cut at the cap {wrong:.1f} wrong ({vain:.0f} in vain "
        f"to escalate all); keep all {ratio(silent + wrong)}, uniform "
        f"{ratio(silent + wrong - uniform)}, oracle by cap {ratio(silent + wrong - saved)}"
    )


def cost_spread(seed: int, runs: int) -> str:
    d = family.draw(seed)
    items = _tiers.workload(600, 0.3, seed)
    original = sim_engine.SimEngine.__init__
    costs: list[float] = []
    for shift in range(runs):

        def init(self: sim_engine.SimEngine, *args: object, _shift: int = shift,
                 **kwargs: object) -> None:
            original(self, *args, **kwargs)  # type: ignore[arg-type]
            if _shift:  # answer lengths stay (keyed by seed and body): only the timing moves
                self._rng.seed(f"{self.seed}:jitter:{_shift}")
                self._straggler_rng.seed(f"{self.seed}:stragglers:{_shift}")

        sim_engine.SimEngine.__init__ = init  # type: ignore[method-assign]
        try:
            run = run_virtual(_tiers.run, "large", items, 2.0, seed, d.small, d.server, 3600.0)
        finally:
            sim_engine.SimEngine.__init__ = original  # type: ignore[method-assign]
        costs.append(run.cost_usd / run.ok)
    spread = " ".join(f"{c / costs[0]:.4f}" for c in costs)
    return f"cost: everything-large per answer against its first run: {spread}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("seeds", type=int, nargs="+")
    parser.add_argument("--jitter", type=int, default=4, help="runs for the cost spread")
    args = parser.parse_args(argv)
    for seed in args.seeds:
        print(f"{seed}: {success_bound(seed)}")
        if args.jitter > 1:
            print(f"{seed}: {cost_spread(seed, args.jitter)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
