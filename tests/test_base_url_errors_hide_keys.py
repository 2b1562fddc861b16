"""``Backend(base_url=...)`` refuses a URL with a key pasted into it without showing the key:
its ``ValidationError`` hides the value given (``hide_input_in_errors``), and before, the URL
parser's own message quoted it back ("Invalid port: 'sk-…'") for a key pasted where the port
goes or a password holding a '/'. A key pasted after the URL, past a space, was accepted and
sent as part of every request's path."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import gptgate as gg

KEY = "sk-proj-SECRET99"


@pytest.mark.parametrize(
    "url",
    [
        f"https://api.example.com:{KEY}/v1",
        f"https://:{KEY[:6]}/{KEY[6:]}@api.example.com/v1",
        f"https://api.example.com/v1 {KEY}",
        f"https://api.example.com/v1\t{KEY}",
    ],
)
def test_a_key_pasted_into_base_url_is_refused_and_not_shown(url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        gg.Backend(name="a", base_url=url, model="m")
    text = str(caught.value)
    assert "base_url" in text
    assert KEY not in text and KEY[:6] not in text and KEY[6:] not in text
