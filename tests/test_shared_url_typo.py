"""A ``shared=`` (or ``GPTGATE_SHARED``) URL with a typo in its scheme — ``rediss//`` for
``rediss://``, ``redis:/`` — or a password holding a ``/`` is refused with a ``ValidationError``
that names the URL; the password in it is masked. Before, such a URL parsed with no network
location at all, so nothing was masked and the Redis password went into the error (and from
there into the crash log of every pod that read the variable)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import gptgate as gg

SECRET = "hunter2pw"


@pytest.mark.parametrize(
    "url",
    [
        f"rediss//:{SECRET}@cache.internal:6380",
        f"redis:/:{SECRET}@cache.internal:6379/0",
        f"redis:{SECRET}@cache.internal",
        f"redis//default:{SECRET}@cache.internal",
        f"redis://:{SECRET[:4]}/{SECRET[4:]}@cache.internal:6379",  # a '/' in the password
    ],
)
def test_a_mistyped_shared_url_is_refused_without_its_password(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError) as caught:
        gg.Shared(url)
    text = str(caught.value)
    assert "shared" in text.lower() or "url" in text
    assert SECRET not in text and SECRET[:4] not in text and SECRET[4:] not in text
    assert "****" in text  # the URL is still shown, to tell which one was wrong
    # the same URL from the environment, through the gateway's config
    monkeypatch.setenv("GPTGATE_SHARED", url)
    backend = gg.Backend(name="a", base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(ValidationError) as caught:
        gg.Gateway([backend])
    assert "shared.url" in str(caught.value) and SECRET[4:] not in str(caught.value)
