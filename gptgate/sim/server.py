"""Serving the simulator over real HTTP: ``serve`` (blocking, for the CLI) and ``SimServer``
(a background uvicorn on an ephemeral loopback port, for tests and benchmarks).

uvicorn is an optional dependency (``gptgate[sim]``), imported only here and only when used.
"""

from __future__ import annotations

import copy
import logging
import socket
import threading
import time
from types import ModuleType, TracebackType
from typing import Any

from gptgate.clock import Clock, ScaledClock, SystemClock
from gptgate.sim.anthropic import AnthropicEngine
from gptgate.sim.anthropic_batches import SimMessageBatches
from gptgate.sim.app import create_app
from gptgate.sim.engine import SimEngine, SimReset
from gptgate.sim.faults import FaultPlan
from gptgate.sim.openai_batches import SimBatches, SimBatchPlan
from gptgate.sim.profiles import SimProfile

__all__ = ["SimServer", "serve"]

_LOOPBACK = "127.0.0.1"


def _uvicorn() -> ModuleType:
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the simulator's HTTP server needs uvicorn: pip install 'gptgate[sim]'"
        ) from exc
    return uvicorn


class _DropSimulatedResets(logging.Filter):
    """uvicorn logs every exception that escapes an app with a traceback; a *scripted* reset
    is not an error, so keep it out of the logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, SimReset)


_FILTER = _DropSimulatedResets()


def _quiet_resets() -> None:
    logger = logging.getLogger("uvicorn.error")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def _clock(time_scale: float) -> Clock:
    return SystemClock() if time_scale == 1.0 else ScaledClock(time_scale)


def serve(
    profile: str,
    *,
    host: str = _LOOPBACK,
    port: int = 8000,
    time_scale: float = 1.0,
    seed: int = 0,
    faults: FaultPlan | None = None,
    batches: SimBatchPlan | None = None,
    listening: socket.socket | None = None,
) -> None:
    """Serve a simulated backend until interrupted (``gptgate sim serve``); ``faults``: the
    random failures and 429 storms to rehearse against; ``batches``: how its Batch API
    (``/v1/files``, ``/v1/batches``; an Anthropic profile's ``/v1/messages/batches``) runs
    jobs; ``listening``: a socket already bound (the CLI's, so port 0 is known first)."""
    uvicorn = _uvicorn()
    engine = SimEngine(profile, clock=_clock(time_scale), seed=seed, faults=faults)
    if isinstance(engine, AnthropicEngine):  # its Message Batches (/v1/messages/batches)
        SimMessageBatches(engine, batches).attach()
    else:
        SimBatches(engine, batches).attach()
    _quiet_resets()
    config = uvicorn.Config(create_app(engine), host=host, port=port, lifespan="off",
                            log_level="info", log_config=_logs_on_stderr(uvicorn))
    uvicorn.Server(config).run(sockets=None if listening is None else [listening])


def _logs_on_stderr(uvicorn: ModuleType) -> dict[str, Any]:
    """uvicorn's log configuration with its access log on stderr, beside its other logs:
    stdout is the command's own output (``--json``: the one line a script reads, then leaves
    the pipe unread — an access log there filled it and blocked the server)."""
    config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config


class SimServer:
    """Run a simulator on ``127.0.0.1`` in a background thread for the ``with`` block.

    ``with SimServer("gpu", time_scale=100) as base_url:`` yields
    ``http://127.0.0.1:<port>/v1``. Pass a :class:`SimEngine` to inspect its ledger afterwards
    (the engine then runs on the server thread's event loop; don't share it with another loop).
    """

    def __init__(
        self,
        engine_or_profile: SimEngine | SimProfile | str,
        *,
        port: int = 0,
        time_scale: float = 1.0,
        seed: int = 0,
        log_level: str = "warning",
        startup_timeout_s: float = 10.0,
    ) -> None:
        if isinstance(engine_or_profile, SimEngine):
            self.engine = engine_or_profile
        else:
            self.engine = SimEngine(engine_or_profile, clock=_clock(time_scale), seed=seed)
        self._port = port
        self._log_level = log_level
        self._startup_timeout_s = startup_timeout_s
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.base_url: str | None = None

    def __enter__(self) -> str:
        uvicorn = _uvicorn()
        _quiet_resets()
        config = uvicorn.Config(
            create_app(self.engine),
            host=_LOOPBACK,
            port=self._port,
            lifespan="off",
            log_level=self._log_level,
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="gptgate-sim-server", daemon=True)
        self._server, self._thread = server, thread
        thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self._stop()
                raise RuntimeError("the simulator server did not start")
            time.sleep(0.002)
        port = server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://{_LOOPBACK}:{port}/v1"
        return self.base_url

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        self._server = self._thread = None
