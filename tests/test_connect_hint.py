"""A backend that cannot be reached says what to check: the server at ``host:port`` refused
(is it running? is the port right?), its host name did not resolve, or TLS failed (http vs
https) — never the rest of the URL, whose userinfo, path or query can carry a key."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import httpx2
import pytest

import gptgate as gg
from gptgate.errors import BackendError
from gptgate.wire import error_for_exception

SECRET_URL = "http://user:hunter2@127.0.0.1:18107/v1/chat/completions?api-key=sk-in-query"


def _failed(cause: BaseException, url: str | None = SECRET_URL) -> str:
    exc = httpx2.ConnectError("All connection attempts failed",
                              request=httpx2.Request("POST", url) if url else None)
    exc.__cause__ = cause
    error = error_for_exception(exc, backend="local")
    assert isinstance(error, BackendError) and error.unsent and error.backend == "local"
    assert error.message.startswith("connection failed (ConnectError)")
    return error.message


def test_a_refused_connection_names_host_and_port_and_what_to_check() -> None:
    message = _failed(ConnectionRefusedError(111, "Connect call failed"))
    assert "127.0.0.1:18107" in message
    assert "refused" in message and "is it running" in message and "base_url" in message
    for secret in ("hunter2", "user", "api-key", "sk-in-query", "/v1", "chat/completions"):
        assert secret not in message


def test_an_unknown_host_name_says_it_did_not_resolve() -> None:
    message = _failed(socket.gaierror(-2, "Name or service not known"),
                      "https://llm.internal.invalid/v1/chat/completions")
    assert "llm.internal.invalid:443" in message and "did not resolve" in message


def test_a_tls_failure_asks_about_http_or_https() -> None:
    message = _failed(ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"))
    assert "TLS" in message and "https" in message


def test_without_a_request_it_still_says_what_to_check() -> None:
    message = _failed(OSError("no route"), url=None)
    assert "the backend's base_url" in message and "is it running" in message


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but not listening: a connection to it is refused, and no one else can
    take it while the test runs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


async def test_a_server_not_running_says_so_over_a_real_socket(closed_port: int) -> None:
    backend = gg.Backend(name="local", base_url=f"http://127.0.0.1:{closed_port}/v1",
                         model="m", api_key="sk-never-shown")
    async with gg.Gateway([backend], max_attempts=1) as gate:
        with pytest.raises(gg.BackendError) as info:
            await gate.chat([{"role": "user", "content": "hi"}], timeout=10)
    text = str(info.value)
    assert f"127.0.0.1:{closed_port}" in text and "refused" in text and "local" in text
    assert "sk-never-shown" not in text and "/v1" not in text
