"""A bad ``GPTGATE_SHARED`` names the variable: a deployment that sets it and never passes
``shared=`` saw only ``shared.url  Value error, unknown scheme in 'localhost:6379'`` — a field
its code never set (found setting ``GPTGATE_SHARED=localhost:6379``, the scheme left out)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import gptgate as gg

BACKEND = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m")


@pytest.mark.parametrize("url", ["localhost:6379", "redis://:hunter2@127.0.0.1:notaport/0"])
def test_a_bad_url_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("GPTGATE_SHARED", url)
    with pytest.raises(ValidationError) as caught:
        gg.GatewayConfig(backends=[BACKEND])
    (error,) = caught.value.errors()
    assert error["loc"][0] == "shared"
    assert "from the environment variable GPTGATE_SHARED" in error["msg"]
    assert "hunter2" not in str(caught.value)


def test_the_same_url_given_in_code_does_not_blame_the_environment() -> None:
    with pytest.raises(ValidationError) as caught:
        gg.GatewayConfig(backends=[BACKEND], shared="localhost:6379")
    assert "GPTGATE_SHARED" not in str(caught.value)
