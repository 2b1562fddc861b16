"""``SyncGateway.close()`` from inside one of its own guarded calls is a typed error, not a
hang: the close waited for every call in flight, the guarded call among them, which waited
for the close to return — forever (the shutdown grace did not end it). Found closing the
gateway from a SIGTERM handler, which Python runs in the main thread, inside whatever guarded
function that thread was running."""

from __future__ import annotations

import threading

import pytest

import gptgate as gg
from tests.mockbackend import Script, backend, ok


def test_closing_inside_a_guarded_call_raises_and_the_gateway_still_closes() -> None:
    gate = gg.SyncGateway(backends=[backend(Script(ok()))], shutdown_grace_s=0.5)
    outcome: list[BaseException | str] = []

    @gate.guard()
    def shutting_down() -> str:
        gate.close()
        return "closed"

    def app() -> None:
        try:
            outcome.append(shutting_down())
        except BaseException as error:
            outcome.append(error)

    worker = threading.Thread(target=app, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "close() inside its own guarded call hung"
    (error,) = outcome
    assert isinstance(error, gg.GateError) and "inside a guarded call" in str(error)
    gate.close()  # after the call: closes at once
    with pytest.raises(gg.GatewayClosedError):
        gate.chat([{"role": "user", "content": "q"}])


def test_a_guarded_call_of_another_gateway_does_not_stop_the_close() -> None:
    first = gg.SyncGateway(backends=[backend(Script(ok()))])
    second = gg.SyncGateway(backends=[backend(Script(ok()))])
    second.chat([{"role": "user", "content": "q"}])  # opened

    @first.guard()
    def close_the_other() -> str:
        second.close()
        return "closed"

    assert close_the_other() == "closed"
    first.close()
    with pytest.raises(gg.GatewayClosedError):
        second.chat([{"role": "user", "content": "q"}])
