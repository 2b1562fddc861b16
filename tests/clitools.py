"""Helpers for the command-line tests: a ``gptgate sim serve`` started as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2

import gptgate
from gptgate.sim.process import free_port

#: the checkout under test, first on the child's path (not an installed copy)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gptgate.__file__)))


def cli_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": _ROOT + (os.pathsep + path if path else "")}


@contextmanager
def cli_server(
    *options: str, port: int | None = None, module: str = "gptgate.cli"
) -> Iterator[tuple[str, dict[str, object]]]:
    """``gptgate sim serve --json OPTIONS`` in a child process (``python -m MODULE``): its
    base URL and what it printed, until the block ends (SIGINT, as Ctrl-C)."""
    port = free_port() if port is None else port
    args = [sys.executable, "-m", module, "sim", "serve", "--port", str(port),
            "--json", *options]
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env()
    )
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        deadline = time.monotonic() + 30
        while True:
            try:
                # any answer: up (an Azure-shaped server has no /models at its root: a 404)
                httpx2.get(f"{info['base_url']}/models", timeout=1.0)
                break
            except httpx2.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.05)
        yield str(info["base_url"]), info
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
