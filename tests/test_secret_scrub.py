"""The exact secrets the gateway sends never reach an error's text, whatever their shape.

A self-hosted server's ``--api-key`` looks like nothing the patterns know (``vllm-token-…``,
32 random characters); a server echoing it in a 401 body must not put it in ``str``,
``repr``, ``args`` or the traceback of the error the caller gets.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator

import httpx2
import pytest

import gptgate as gg
from gptgate.scrub import forget_secrets, remember_secret, scrub_known
from tests.mockbackend import USER, Script, backend, gateway

KEY = "vllm-token-0123456789abcdef"
RANDOM_KEY = "q8Zr2LmX0vT4nB7yK1wP5sD9fH3jC6aE"  # 32 characters, no known prefix


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


def echo_credentials(request: httpx2.Request) -> httpx2.Response:
    """A 401 repeating every header value the request carried (bare, without its name or
    ``Bearer``, as OpenAI echoes a key), as a careless proxy does."""
    sent = [v.removeprefix("Bearer ") for k, v in request.headers.items() if k != "host"]
    return httpx2.Response(
        401,
        json={"error": {"message": f"Incorrect API key provided: {' '.join(sent)}",
                        "code": "invalid_api_key"}},
    )


def everything(error: BaseException) -> str:
    return " ".join(
        [str(error), repr(error), repr(error.args), *traceback.format_exception(error)]
    )


async def failing_chat(gate: gg.Gateway, **kwargs: object) -> gg.GateError:
    async with gate:
        with pytest.raises(gg.GateError) as caught:
            await gate.chat(USER, max_tokens=5, **kwargs)  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize("key", [KEY, RANDOM_KEY])
async def test_an_echoed_api_key_of_any_shape_is_masked(key: str) -> None:
    gate = gateway(backend(Script(echo_credentials), api_key=key))
    error = await failing_chat(gate)
    assert error.status == 401
    assert key not in everything(error)
    assert "***" in error.message


async def test_a_key_from_the_environment_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LOCAL_KEY", RANDOM_KEY)
    gate = gateway(backend(Script(echo_credentials), api_key_env="MY_LOCAL_KEY"))
    error = await failing_chat(gate)
    assert RANDOM_KEY not in everything(error)


async def test_configured_header_values_are_masked_but_not_plain_ones() -> None:
    headers = {"x-portkey-virtual-key": "pk-virt-0011223344", "api-key": "azure0123456789",
               "user-agent": "my-app/1.2.3"}
    gate = gateway(backend(Script(echo_credentials), headers=headers))
    text = everything(await failing_chat(gate))
    assert "pk-virt-0011223344" not in text
    assert "azure0123456789" not in text
    assert "my-app/1.2.3" in text  # not a secret: still says who called


async def test_a_callers_own_authorization_header_is_masked() -> None:
    gate = gateway(backend(Script(echo_credentials)))
    error = await failing_chat(
        gate, extra_headers={"Authorization": f"Bearer {RANDOM_KEY}", "x-request-tag": "tag-42"}
    )
    text = everything(error)
    assert RANDOM_KEY not in text
    assert "tag-42" in text  # a request tag is no secret: it still helps to debug


def in_band_error(request: httpx2.Request) -> httpx2.Response:
    """A 200 whose event stream carries an error event echoing the key."""
    body = f'data: {{"error": {{"message": "bad key {KEY}", "type": "server_error"}}}}\n\n'
    return httpx2.Response(
        200, content=body.encode(), headers={"content-type": "text/event-stream"}
    )


@pytest.mark.parametrize("server", [echo_credentials, in_band_error])
async def test_a_stream_whose_server_echoes_the_key_does_not_repeat_it(
    server: Callable[[httpx2.Request], httpx2.Response],
) -> None:
    """Refused with a 401 before the stream, or told in an error event inside it."""
    gate = gateway(backend(Script(server), api_key=KEY), max_attempts=1)
    async with gate:
        with pytest.raises(gg.GateError) as caught:
            async with gate.stream(USER, max_tokens=5) as s:
                async for _ in s:
                    pass
    assert KEY not in everything(caught.value)


async def test_a_key_at_the_truncation_point_leaves_no_prefix() -> None:
    """Masked before the 500-character cut: a cut key would escape the literal match."""
    message = "x" * 460 + " " + KEY + " tail"
    script = Script(httpx2.Response(500, json={"error": {"message": message}}))
    gate = gateway(backend(script, api_key=KEY), max_attempts=1)
    error = await failing_chat(gate)
    assert KEY[:16] not in everything(error)


def test_a_placeholder_key_is_not_a_secret() -> None:
    """vLLM's ``EMPTY``: masking it would mangle ordinary words in every message."""
    remember_secret("EMPTY")
    remember_secret(KEY)
    assert scrub_known("EMPTY queue, key " + KEY) == "EMPTY queue, key ***"


def test_a_backend_shows_its_header_names_but_never_their_values() -> None:
    """A backend (or the gateway's config) is what people log: its headers carry proxy
    tokens as often as ``api_key`` carries the key."""
    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key=KEY,
                   headers={"x-api-key": RANDOM_KEY})
    config = gg.GatewayConfig(backends=[b])
    for text in (repr(b), str(b), repr(config), str(config)):
        assert "x-api-key" in text
        assert RANDOM_KEY not in text and KEY not in text
    assert b.headers == {"x-api-key": RANDOM_KEY}  # still sent as given
