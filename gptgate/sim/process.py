"""A simulator served by uvicorn in a *child process* on 127.0.0.1 — one a test can kill.

``SimServer`` runs in a thread of the test's own process: it cannot die the way a backend does.
:class:`SimProcess` can: :meth:`SimProcess.kill` is a SIGKILL (every open socket reset by the
kernel, every new connection refused), and :meth:`SimProcess.restart` brings a fresh engine
back on the same port — a backend that crashed and was restarted by its supervisor. It also
keeps the client's CPU time apart from the server's, for benchmarks.

>>> with SimProcess("gpu", time_scale=10, slots=64) as server:   # doctest: +SKIP
...     gate = gg.Gateway([gg.Backend(name="a", base_url=server.base_url, model="m")])
...     server.kill()
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from types import TracebackType
from typing import Any

import httpx2

from gptgate.sim.faults import FaultPlan
from gptgate.sim.ledger import LedgerSnapshot, RequestBill

__all__ = ["SimProcess", "free_port"]

_SERVER = r"""
import json, sys, uvicorn
from gptgate.clock import ScaledClock, SystemClock
from gptgate.sim import SimEngine, create_app, get_profile
from gptgate.sim.server import _quiet_resets
from gptgate.sim.faults import FaultPlan
port, scale, name, overrides, seed, faults, bills = sys.argv[1:8]
profile = get_profile(name).model_copy(update=json.loads(overrides))
clock = SystemClock() if float(scale) == 1.0 else ScaledClock(float(scale))
engine = SimEngine(profile, clock=clock, seed=int(seed), faults=FaultPlan(**json.loads(faults)))
if bills == "1":
    engine.ledger.keep_bills()
_quiet_resets()
uvicorn.run(create_app(engine), host="127.0.0.1", port=int(port), log_level="critical",
            access_log=False, lifespan="off")
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class SimProcess:
    """``with SimProcess(profile, time_scale=..., seed=..., faults=..., **profile_overrides) as
    server:`` serves ``server.base_url`` from a child process until the block ends."""

    def __init__(
        self,
        profile: str = "gpu",
        *,
        time_scale: float = 1.0,
        seed: int = 0,
        port: int | None = None,
        faults: FaultPlan | None = None,
        startup_timeout_s: float = 30.0,
        request_bills: bool = False,
        **overrides: Any,
    ) -> None:
        self.profile = profile
        self.time_scale = time_scale
        self.seed = seed
        self.port = port or free_port()
        self.overrides = overrides
        #: random faults and 429 storms (a fresh engine after ``restart`` draws them anew)
        self.faults = faults or FaultPlan()
        self.startup_timeout_s = startup_timeout_s
        #: keep each request's own bill (:meth:`request_bills`)
        self.keeps_bills = request_bills
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SimProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server and wait until it answers (a RuntimeError if it never does)."""
        args = [sys.executable, "-c", _SERVER, str(self.port), str(self.time_scale)]
        args += [self.profile, json.dumps(self.overrides), str(self.seed)]
        args.append(json.dumps(dataclasses.asdict(self.faults)))
        args.append("1" if self.keeps_bills else "0")
        self._process = process = subprocess.Popen(args)
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            try:
                if httpx2.get(f"{self.base_url}/models", timeout=1.0).status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                self.stop()
                raise RuntimeError("the simulator process did not start")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no graceful close, as when a backend's host dies."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def restart(self) -> None:
        """Kill it (if alive) and start a fresh engine on the same port."""
        self.kill()
        self.start()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def ledger(self) -> LedgerSnapshot:
        """The running engine's bill so far (a restart starts a new one)."""
        response = httpx2.get(f"{self.base_url}/sim/ledger", timeout=10.0)
        response.raise_for_status()
        return LedgerSnapshot(**response.json())

    def request_bills(self) -> list[RequestBill]:
        """The running engine's bill request by request (:class:`RequestBill`), oldest first
        (empty unless built with ``request_bills=True``)."""
        response = httpx2.get(f"{self.base_url}/sim/ledger/requests", timeout=10.0)
        response.raise_for_status()
        return [RequestBill(**bill) for bill in response.json()]

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None
