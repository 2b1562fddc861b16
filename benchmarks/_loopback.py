"""A fast simulator served on 127.0.0.1 in a child process, for client-side CPU benchmarks.

The server runs in its own process so that the client's ``time.process_time()`` counts only the
client. Its profile has no rate limits, ample slots and short answers: the point is to load the
client, not the server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from gptgate.sim import SimProcess

#: no rate limits, ample slots, short answers
BENCH_PROFILE: dict[str, Any] = dict(
    name="bench", slots=4096, max_queue=None, rpm=None, tpm=None, replicas=1,
    jitter_sigma=0.0, load_jitter_sigma=0.0, overload_error_rate=0.0,
    output_tokens_mean=40, output_tokens_sigma=0.0,
)


@contextlib.contextmanager
def loopback_simulator(time_scale: float = 1000.0) -> Iterator[str]:
    """Yields the base URL of a simulator served by uvicorn in a child process."""
    with SimProcess("gpu", time_scale=time_scale, seed=1, **BENCH_PROFILE) as server:
        yield server.base_url
