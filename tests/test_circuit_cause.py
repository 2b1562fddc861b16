"""While a backend's circuit is open, the error every call gets says *why* it opened: the
backend's last failure (a refused connection, a proxy's 502 page, a body that is not JSON),
and its status. Before, all calls after the first few read only "every eligible backend's
circuit is open (backend=b0, retry_after=9.98)", status None: with every backend down, 200
of 200 concurrent calls got that line and none said the server refused the connection — at
3 a.m. the cause was only in the first handful of errors, long scrolled away."""

from __future__ import annotations

import socket

import httpx2
import pytest

import gptgate as gg

MESSAGES = [{"role": "user", "content": "hi"}]
PAGE = ("<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway"
        "</h1></center><hr><center>nginx</center></body></html>")


def _gate(*backends: gg.Backend) -> gg.Gateway:
    # the circuit opens after 2 failures and stays open for the whole test (60 s cool-down);
    # a call meeting it fails at once (no breaker wait)
    return gg.Gateway(list(backends), breaker_threshold=2, breaker_cooldown_s=60.0,
                      max_breaker_wait_s=0.0, max_attempts=1, retry_budget_ratio=None)


async def _circuit_error(gate: gg.Gateway) -> gg.BackendError:
    for _ in range(4):  # open every circuit
        with pytest.raises(gg.GateError):
            await gate.chat(MESSAGES)
    with pytest.raises(gg.BackendError) as caught:
        await gate.chat(MESSAGES)
    assert "circuit is open" in caught.value.message
    return caught.value


async def test_a_proxy_page_that_opened_the_circuit_is_named() -> None:
    sent = 0

    def proxy(request: httpx2.Request) -> httpx2.Response:
        nonlocal sent
        sent += 1
        return httpx2.Response(502, headers={"content-type": "text/html"}, text=PAGE)

    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m",
                   api_key="sk-proj-secretsecretsecret123456",
                   transport=httpx2.MockTransport(proxy))
    async with _gate(b) as gate:
        error = await _circuit_error(gate)
    assert sent == 2  # the open circuit sent nothing more
    assert error.status is None  # nothing was sent: no answer of this call's
    assert "b last failed [502]: " in error.message
    assert "502 Bad Gateway" in error.message
    assert "<html>" not in error.message or len(error.message) < 400
    assert "secretsecret" not in str(error)


async def test_every_refused_backend_is_named_with_its_cause() -> None:
    ports = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()  # nothing listens there: connection refused
    backends = [gg.Backend(name=f"b{i}", base_url=f"http://127.0.0.1:{p}/v1", model="m",
                           api_key="EMPTY") for i, p in enumerate(ports)]
    async with _gate(*backends) as gate:
        error = await _circuit_error(gate)
    for i, port in enumerate(ports):
        assert f"b{i} last failed" in error.message
        assert f"127.0.0.1:{port} refused the connection" in error.message
    assert not error.retryable
