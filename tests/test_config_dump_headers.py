"""A configuration dump — ``Backend.model_dump()``, ``model_dump_json()``, the gateway's
``config`` — shows ``headers`` by name only, as the backend's repr does: a proxy's token goes
there as often as in ``api_key`` (never dumped). Before, a service logging its effective
configuration at start (``gate.config.model_dump_json()``) logged the token in full."""

from __future__ import annotations

import gptgate as gg

TOKEN = "sk-proxy-SECRET-0123456789"


def test_header_values_stay_out_of_every_dump() -> None:
    backend = gg.Backend(
        name="a", base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-key-SECRET-98765",
        headers={"Authorization": f"Bearer {TOKEN}", "X-Team": "search"},
    )
    gate = gg.Gateway([backend])
    dumps = [
        str(backend.model_dump()), backend.model_dump_json(), repr(backend), str(backend),
        str(gate.config.model_dump()), gate.config.model_dump_json(),
        str(gate.config.model_dump(mode="json")),
    ]
    for dump in dumps:
        assert TOKEN not in dump and "sk-key-SECRET" not in dump
        assert "Authorization" in dump  # which headers are set is still shown
    # the headers themselves are untouched: they are sent as given
    assert backend.headers["Authorization"] == f"Bearer {TOKEN}"
    assert gg.Backend.model_validate(backend, from_attributes=True).headers == backend.headers


def test_the_shared_redis_password_stays_out_of_every_dump() -> None:
    backend = gg.Backend(name="a", base_url="http://127.0.0.1:9/v1", model="m")
    gate = gg.Gateway([backend], shared="redis://:hunter2pw@cache.internal:6379/0")
    assert gate.config.shared is not None
    dumps = [
        str(gate.config.model_dump()), gate.config.model_dump_json(),
        str(gate.config.shared.model_dump()), repr(gate.config),
    ]
    for dump in dumps:
        assert "hunter2pw" not in dump and "cache.internal:6379" in dump
    assert gate.config.shared.url.endswith(":hunter2pw@cache.internal:6379/0")  # as connected
