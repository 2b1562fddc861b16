"""A bad configuration value is a ``ValueError`` naming its field, whichever object is
configured: the pydantic models (``Backend``, ``Budget``, ``Price``, ``Shared``, the
gateway's options) raise ``pydantic.ValidationError``, a ``ValueError``; ``ResponseCache``
raised ``BadRequestError`` alone, so one ``except ValueError`` around a service's set-up
missed exactly the response cache's ``ttl_s=-1``. It now raises ``InvalidConfigError``: a
``ValueError`` and still the ``BadRequestError`` it was (code catching that keeps working)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import gptgate as gg

BAD: dict[str, tuple[Callable[[], Any], str]] = {
    "Backend": (lambda: gg.Backend(name="a", base_url="http://127.0.0.1:9/v1", model="m",
                                   concurrency=0), "concurrency"),
    "Budget": (lambda: gg.Budget(usd_per_hour=-1), "usd_per_hour"),
    "Gateway": (lambda: gg.Gateway([gg.Backend(name="a", base_url="http://127.0.0.1:9/v1",
                                               model="m")], embed_window_s=-1),
                "embed_window_s"),
    "ResponseCache ttl_s<0": (lambda: gg.ResponseCache(ttl_s=-1), "ttl_s"),
    "ResponseCache ttl_s=0": (lambda: gg.ResponseCache(ttl_s=0), "ttl_s"),
    "ResponseCache ttl_s str": (lambda: gg.ResponseCache(ttl_s="60"), "ttl_s"),  # type: ignore[arg-type]
    "ResponseCache max_entries": (lambda: gg.ResponseCache(max_entries=0), "max_entries"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_value_is_a_value_error_naming_its_field(case: str) -> None:
    make, field = BAD[case]
    with pytest.raises(ValueError, match=field):
        make()


@pytest.mark.parametrize("value", [-1, 0, float("nan"), True])
def test_the_response_caches_error_is_still_a_bad_request(value: object) -> None:
    with pytest.raises(gg.BadRequestError, match="ttl_s") as caught:
        gg.ResponseCache(ttl_s=value)  # type: ignore[arg-type]
    assert isinstance(caught.value, gg.InvalidConfigError)
    assert isinstance(caught.value, ValueError)
