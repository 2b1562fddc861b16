"""A non-streamed 200 answer that is a proxy's HTML page (a login, maintenance or error page
under a 200) books nothing: no model ran, so the provider bills nothing for it.

Before, the page was a "malformed response" like a JSON body cut short, which the server
generated and billed in full — so the ledger booked the prompt (and an output estimate) for
every such call: ~$5e-05 a call at $2/Mtok on a short prompt, a ledger running ahead of the
provider's bill by that much per call for as long as the proxy answered. The other
non-answers (a refused connection, a 502 with a JSON error, a 502 HTML page) booked nothing
already; the 200 page is now one of them. A JSON body cut short stays billed (the server did
generate it: tests/test_billing.py)."""

from __future__ import annotations

import json

import httpx2
import pytest

import gptgate as gg

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)
PROMPT = [{"role": "user", "content": "Summarise the incident report in three lines. " * 4}]
LOGIN = (
    "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>Sign in - Corp Proxy</title>"
    "</head><body><form action='/login'>…</form></body></html>"
)
ANSWER = {
    "id": "r", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
}


def _answer(kind: str) -> httpx2.Response:
    if kind == "login page":
        return httpx2.Response(200, headers={"content-type": "text/html; charset=utf-8"},
                               text=LOGIN)
    if kind == "untitled page":  # no title, no heading: still a page, not an answer
        return httpx2.Response(200, headers={"content-type": "text/html"},
                               text="<html><body><p>Please log in.</p></body></html>")
    if kind == "page served as JSON":  # a proxy that labels its page application/json
        return httpx2.Response(200, headers={"content-type": "application/json"}, text=LOGIN)
    if kind == "502 JSON":
        return httpx2.Response(502, json={"error": {"message": "upstream unavailable"}})
    if kind == "502 page":
        return httpx2.Response(502, headers={"content-type": "text/html"}, text=LOGIN)
    if kind == "refused":
        raise httpx2.ConnectError("connection refused")
    if kind == "JSON cut short":  # generated, then cut: billed (the server ran the model)
        body = json.dumps(ANSWER)
        return httpx2.Response(200, headers={"content-type": "application/json"},
                               text=body[: len(body) // 2])
    raise AssertionError(kind)


FIELDS = ("attempts", "input_tokens", "output_tokens", "wasted_tokens", "cost_usd")


async def _booked(kind: str) -> dict[str, float]:
    """One answered call (teaches the backend its output sizes), then one call answered by
    ``kind``: what the ledger booked for the second."""
    answers = iter(["ok", kind])

    def handler(request: httpx2.Request) -> httpx2.Response:
        what = next(answers)
        return httpx2.Response(200, json=ANSWER) if what == "ok" else _answer(what)

    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key="EMPTY",
                   price=PRICE, transport=httpx2.MockTransport(handler))
    async with gg.Gateway([b], max_attempts=1) as gate:
        await gate.chat(PROMPT, max_tokens=50)
        entry = gate.ledger.entries["b"]
        before = {name: getattr(entry, name) for name in FIELDS}
        with pytest.raises(gg.BackendError):
            await gate.chat(PROMPT, max_tokens=50)
        return {name: getattr(entry, name) - before[name] for name in FIELDS}


NOT_ANSWERS = ["login page", "untitled page", "page served as JSON", "502 JSON", "502 page",
               "refused"]


@pytest.mark.parametrize("kind", NOT_ANSWERS)
async def test_a_non_answer_books_nothing(kind: str) -> None:
    booked = await _booked(kind)
    assert booked["cost_usd"] == 0.0, f"{kind}: ${booked['cost_usd']:.2e} booked for no answer"
    assert booked == dict.fromkeys(FIELDS, 0)


async def test_a_json_body_cut_short_is_still_billed() -> None:
    """The server generated it: the prompt and an output estimate are booked (the line the
    fix must not cross)."""
    booked = await _booked("JSON cut short")
    assert booked["attempts"] == 1
    assert booked["input_tokens"] > 0 and booked["output_tokens"] > 0 and booked["cost_usd"] > 0


@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "application/json"])
async def test_a_page_to_an_sdk_books_nothing_and_counts_against_the_backend(
    content_type: str,
) -> None:
    """The same page reaching an SDK through ``gate.http_client``: before, a ``text/html`` page
    was a success to the circuit (it never opened, as on ``gate.chat`` it does), and one
    labelled JSON was booked as a malformed answer — the prompt and ``max_tokens``, $5.0e-04
    a call here (tests/test_sdk_malformed.py: a JSON body cut short still is)."""
    sent = 0

    def proxy(request: httpx2.Request) -> httpx2.Response:
        nonlocal sent
        sent += 1
        return httpx2.Response(200, headers={"content-type": content_type}, text=LOGIN)

    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key="EMPTY",
                   price=PRICE, transport=httpx2.MockTransport(proxy))
    async with gg.Gateway([b], breaker_threshold=3, breaker_cooldown_s=60.0,
                          max_breaker_wait_s=0.0) as gate:
        client = gate.http_client("b")
        for _ in range(5):
            await client.post("http://127.0.0.1:9/v1/chat/completions",
                              json={"model": "m", "messages": PROMPT, "max_tokens": 50})
        entry = gate.ledger.entries["b"]
        assert (entry.cost_usd, entry.attempts, entry.input_tokens) == (0.0, 0, 0)
        assert gate.stats()["b"].circuit == "open"
    assert sent == 3  # the circuit opened on the third page
