"""``shared=``: validation up front, ``GPTGATE_SHARED``, and Redis never imported without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from pydantic import ValidationError

import gptgate as gg

BACKEND = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", concurrency=4)


def test_a_url_is_shared_with_defaults() -> None:
    config = gg.GatewayConfig(backends=[BACKEND], shared="redis://127.0.0.1:6379/0")
    assert config.shared == gg.Shared("redis://127.0.0.1:6379/0")
    assert config.shared is not None
    assert (config.shared.namespace, config.shared.lease_s, config.shared.op_budget_s) == (
        "gptgate",
        10.0,
        0.05,
    )


def test_shared_object_keeps_its_options() -> None:
    shared = gg.Shared("rediss://cache:6380/2", namespace="checkout-svc", lease_s=3.0)
    config = gg.GatewayConfig(backends=[BACKEND], shared=shared)
    assert config.shared is shared


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:6379", "unknown scheme"),
        ("127.0.0.1:6379", "unknown scheme"),
        ("redis://", "no host"),
        ("redis://127.0.0.1:notaport/0", "malformed"),
        ("redis://127.0.0.1:6379/zero", "database number"),
        ("unix://", "socket path"),
    ],
)
def test_bad_url_is_a_validation_error_naming_the_field(url: str, why: str) -> None:
    with pytest.raises(ValidationError) as caught:
        gg.GatewayConfig(backends=[BACKEND], shared=url)
    error = caught.value.errors()[0]
    assert error["loc"][0] == "shared"
    assert why in str(caught.value)


@pytest.mark.parametrize(
    "options",
    [{"lease_s": 0}, {"op_budget_s": -1.0}, {"namespace": "has space"}, {"required": "yes"}],
)
def test_bad_option_names_it(options: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as caught:
        gg.Shared("redis://127.0.0.1:6379/0", **options)
    assert caught.value.errors()[0]["loc"] == (next(iter(options)),)


def test_password_stays_out_of_reprs_and_errors() -> None:
    shared = gg.Shared("redis://:hunter2@127.0.0.1:6379/0")
    assert "hunter2" not in repr(shared)
    with pytest.raises(ValidationError) as caught:
        gg.Shared("redis://:hunter2@127.0.0.1:bad/0")
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("via_env", [False, True])
def test_password_stays_out_of_the_gateways_errors(
    monkeypatch: pytest.MonkeyPatch, via_env: bool
) -> None:
    """``Gateway(shared="redis://:pw@…")`` or ``GPTGATE_SHARED`` with a bad port: the error
    names the field, the password is not in it (pydantic showed the whole input value)."""
    url = "redis://:hunter2@127.0.0.1:notaport/0"
    if via_env:
        monkeypatch.setenv("GPTGATE_SHARED", url)
    with pytest.raises(ValidationError) as caught:
        if via_env:
            gg.Gateway([BACKEND])
        else:
            gg.Gateway([BACKEND], shared=url)
    assert caught.value.errors()[0]["loc"][0] == "shared"
    assert "hunter2" not in str(caught.value) and "hunter2" not in repr(caught.value)
    assert "***" in str(caught.value)  # where it points is still shown


def test_env_configures_a_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPTGATE_SHARED", "redis://10.0.0.5:6379/1")
    config = gg.GatewayConfig(backends=[BACKEND])
    assert config.shared is not None and config.shared.url == "redis://10.0.0.5:6379/1"
    # an explicit argument wins, None included
    assert gg.GatewayConfig(backends=[BACKEND], shared=None).shared is None


def test_bad_env_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPTGATE_SHARED", "memcached://x")
    with pytest.raises(ValidationError) as caught:
        gg.GatewayConfig(backends=[BACKEND])
    assert caught.value.errors()[0]["loc"][0] == "shared"


def test_without_shared_redis_is_never_imported() -> None:
    """A whole gateway lifecycle and a call: not one redis module loaded."""
    code = textwrap.dedent(
        """
        import sys, anyio, httpx2
        import gptgate as gg
        sys.path.insert(0, "tests")
        from mockbackend import Script, backend, gateway, ok, USER

        async def main():
            async with gateway(backend(Script(ok()))) as gate:
                assert (await gate.chat(USER)).text
                assert gate.stats()["mock"].fleet is None
        anyio.run(main)
        loaded = sorted(m for m in sys.modules if m == "redis" or m.startswith("redis."))
        assert not loaded, loaded
        print("ok")
        """
    )
    env_free = {k: v for k, v in __import__("os").environ.items() if k != "GPTGATE_SHARED"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_free, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
