"""A simulator served by uvicorn in a *child process* on 127.0.0.1, so that a test can kill it
(SIGKILL) mid-job the way a real backend dies: refused connections, sockets reset mid-body."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2

_SERVER = r"""
import json, sys, uvicorn
from gptgate.clock import ScaledClock
from gptgate.sim import SimEngine, create_app, get_profile
port, scale, name, overrides, seed = sys.argv[1:6]
profile = get_profile(name).model_copy(update=json.loads(overrides))
engine = SimEngine(profile, clock=ScaledClock(float(scale)), seed=int(seed))
uvicorn.run(create_app(engine), host="127.0.0.1", port=int(port), log_level="critical",
            access_log=False, lifespan="off")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    base_url: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        """SIGKILL: no graceful close, every open socket reset by the kernel."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@contextlib.contextmanager
def server_process(
    profile: str = "gpu", *, scale: float = 1.0, seed: int = 0, **overrides: Any
) -> Iterator[ServerProcess]:
    port = free_port()
    args = [sys.executable, "-c", _SERVER, str(port), str(scale), profile]
    proc = subprocess.Popen([*args, json.dumps(overrides), str(seed)])
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
                raise RuntimeError("the simulator process did not start")
            time.sleep(0.05)
        yield ServerProcess(base_url, proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
