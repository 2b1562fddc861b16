"""A fast simulator served on 127.0.0.1 in a child process, for client-side CPU benchmarks.

The server runs in its own process so that the client's ``time.process_time()`` counts only the
client. Its profile has no rate limits, ample slots and short answers: the point is to load the
client, not the server.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


SERVER = r"""
import sys, uvicorn
from gptgate.clock import ScaledClock
from gptgate.sim import SimEngine, create_app, get_profile
profile = get_profile("gpu").model_copy(update=dict(
    name="bench", slots=4096, max_queue=None, rpm=None, tpm=None, replicas=1,
    jitter_sigma=0.0, load_jitter_sigma=0.0, overload_error_rate=0.0,
    output_tokens_mean=40, output_tokens_sigma=0.0,
))
engine = SimEngine(profile, clock=ScaledClock(float(sys.argv[2])), seed=1)
uvicorn.run(create_app(engine), host="127.0.0.1", port=int(sys.argv[1]), log_level="error",
            access_log=False, lifespan="off")
"""


@contextlib.contextmanager
def loopback_simulator(time_scale: float = 1000.0) -> Iterator[str]:
    """Yields the base URL of a simulator served by uvicorn in a child process."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(time_scale)])
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx2.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the loopback simulator did not start")
            time.sleep(0.1)
        yield base_url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
