"""benchmarks/embed.py (issue 36's done-when), pinned smaller: merged gate.embed calls send
at most 1/20 of the requests in at most 0.3x the time of each text alone, the same vectors,
ledger = the server's bill; a re-run job is answered from the response cache."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import embed as bench

from gptgate.sim import run_virtual


def test_merged_embeddings_send_a_twentieth_of_the_requests_in_under_a_third_of_the_time() -> None:
    alone = run_virtual(lambda: bench.embed_run(2000, 200, 0.0))
    merged = run_virtual(lambda: bench.embed_run(2000, 200, 0.005))
    assert alone["requests"] == 2000
    assert merged["requests"] <= 2000 / 20
    assert merged["time_s"] <= 0.3 * alone["time_s"]
    assert merged["vectors"] == alone["vectors"] and None not in merged["vectors"]
    assert merged["ledger_tokens"] == merged["bill_tokens"]
    assert abs(merged["ledger_usd"] - merged["bill_usd"]) < 1e-12


def test_a_re_run_job_is_served_from_the_response_cache() -> None:
    out = run_virtual(lambda: bench.cache_run(20, 10))
    first, again, burst = out["rows"]
    assert first[2] == 20 and first[3] == 0
    assert again[2] == 0 and again[3] == 20 and again[4] == 0
    assert burst[2] == 1
