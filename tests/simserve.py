"""The simulator's gpu profile with no rate limits and no queue bound, served on loopback
on a scaled clock: the one server of tests that look at what a call records (spans,
metrics, the ledger), not at how a server refuses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import gptgate as gg
from gptgate.sim import SimEngine, SimServer, get_profile


@contextmanager
def unlimited_gpu(output_tokens_mean: int, *, seed: int, scale: float) -> Iterator[str]:
    """The server's base URL while it runs; answers of ``output_tokens_mean`` on average."""
    profile = get_profile("gpu").model_copy(update={
        "rpm": None, "tpm": None, "max_queue": None, "output_tokens_mean": output_tokens_mean,
    })
    with SimServer(SimEngine(profile, clock=gg.ScaledClock(scale), seed=seed),
                   time_scale=scale) as url:
        yield url
