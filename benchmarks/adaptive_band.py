"""Which fixed limits would meet issue #3's goodput and p99 targets? (the feasible band)

``benchmarks/adaptive.py`` judges ``auto`` against each profile's grid of fixed limits (reaching
the backend's bound: ``levels_for``): goodput ≥ 95% of the best limit's, p99 ≤ 1.25× the p99 of
the smallest limit within 10% of the best. This script asks the question the other way round:
scanning fixed limits finely around each profile's knee, which of them would pass both targets
against that same grid — per run, and pooled (the median over the seeds, as adaptive.py judges
``auto``)? An adaptive limit can only pass by spending its time inside this band, so its width
says how hard the targets are on a profile: a band one integer wide cannot be held by any limit
that probes around its operating point, bands that do not overlap between seeds cannot be hit
by one rule, and an empty pooled band cannot be met even by the best fixed limit.

Virtual time (exact). Each cell is ``limit: goodput vs best / p99 vs reference``; ``*`` marks a
limit inside the band.

    python benchmarks/adaptive_band.py [--profiles tpu,gpu,gpu-small] [--requests 1000,3000]
                                       [--seeds 11,12,13] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adaptive import Row, levels_for, pooled, references, run_row

from gptgate.sim import run_virtual

#: the fine scan per profile: around where its goodput curve bends
SCANS: dict[str, range] = {
    "tpu": range(64, 129, 8),
    "gpu": range(14, 37, 2),
    "cpu": range(1, 9),
    "gpu-small": range(6, 17),
    "tier1": range(10, 31, 2),
    "plateau": range(4, 17),
}

Key = tuple[str, int, int, int]  # profile, requests, seed, limit


def run(key: Key) -> Row:
    profile, requests, seed, limit = key
    return run_virtual(run_row, profile, limit, requests, seed)


def band(profile: str, requests: int, seed: int, rows: dict[Key, Row]) -> tuple[list[int], str]:
    grid = [rows[(profile, requests, seed, c)] for c in levels_for(profile)]
    best, near = references(grid, requests)
    inside: list[int] = []
    cells: list[str] = []
    for c in SCANS[profile]:
        row = rows[(profile, requests, seed, c)]
        goodput, p99 = row.goodput / best.goodput, row.p99_s / near.p99_s
        ok = goodput >= 0.95 and p99 <= 1.25
        inside += [c] if ok else []
        cells.append(f"{c}:{goodput:.0%}/{p99:.2f}{'*' if ok else ''}")
    head = f"best fixed {best.label}, p99 reference {near.label}"
    return inside, head + "\n    " + " ".join(cells)


def pooled_band(
    profile: str, requests: int, seeds: list[int], rows: dict[Key, Row]
) -> tuple[list[int], str]:
    """The band as adaptive.py judges ``auto`` (issue 14): each limit's median over the seeds
    against the references of the medians."""
    limits = sorted({*levels_for(profile), *SCANS[profile]})
    medians = {
        row.concurrency: row
        for row in pooled([[rows[(profile, requests, s, c)] for c in limits] for s in seeds])
    }
    best, near = references([medians[c] for c in levels_for(profile)], requests)
    inside: list[int] = []
    cells: list[str] = []
    for c in SCANS[profile]:
        goodput, p99 = medians[c].goodput / best.goodput, medians[c].p99_s / near.p99_s
        ok = goodput >= 0.95 and p99 <= 1.25
        inside += [c] if ok else []
        cells.append(f"{c}:{goodput:.1%}/{p99:.2f}{'*' if ok else ''}")
    head = f"best fixed {best.label}, p99 reference {near.label}"
    return inside, head + "\n    " + " ".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="tpu,gpu,gpu-small")
    parser.add_argument("--requests", default="1000,3000")
    parser.add_argument("--seeds", default="11,12,13")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    profiles = args.profiles.split(",")
    unknown = [p for p in profiles if p not in SCANS]
    if unknown:
        parser.error(f"no scan for {unknown}; known: {', '.join(SCANS)}")
    sizes = [int(r) for r in args.requests.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    print(
        f"$ python benchmarks/adaptive_band.py --profiles {args.profiles} "
        f"--requests {args.requests} --seeds {args.seeds}\n"
    )
    keys = sorted(
        {
            (p, r, s, c)
            for p in profiles
            for r in sizes
            for s in seeds
            for c in (*levels_for(p), *SCANS[p])
        },
        key=lambda k: -k[1] * k[3],  # longest first: the pool finishes together
    )
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        rows = dict(zip(keys, pool.map(run, keys, chunksize=1), strict=True))
    for p in profiles:
        for r in sizes:
            bands = []
            for s in seeds:
                inside, detail = band(p, r, s, rows)
                bands.append(set(inside))
                print(f"{p} {r} calls seed {s}: band {inside or 'empty'} ({detail})")
            common = sorted(set.intersection(*bands))
            print(f"{p} {r} calls, every seed: {common or 'no common limit'}")
            inside, detail = pooled_band(p, r, seeds, rows)
            print(f"{p} {r} calls, pooled: band {inside or 'empty'} ({detail})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
