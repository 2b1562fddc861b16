"""An SDK request's error response, its body read before the refusal is classified.

Some refusals are told apart only by their body: an account out of funds is OpenAI's 429
``insufficient_quota`` and Anthropic's 400 "credit balance is too low"
(gptgate/wire/out_of_funds.py), a request larger than the whole rate limit is a 429 that
says so. ``gate.chat`` reads every body; the transport under an SDK on ``gate.http_client``
classified a 4xx by its status alone, so through the SDK an empty OpenAI account was a rate
limit (paused, requeued, never counted against the circuit: 20 of 20 requests went to the
dead account) and an empty Anthropic one a malformed call.

A 4xx body is short (a JSON error), so it is read here, bounded, and the SDK reads the same
bytes from the response afterwards. A body that does not arrive within the bound is cut: the
SDK gets the refusal with an empty body, as the status alone classified it before. A caller
cancelled meanwhile: the response is closed and the refusal counted by its status alone
(sdk_client.py), so its permit goes back.
"""

from __future__ import annotations

import anyio
import httpx2

from .clock import Clock

__all__ = ["read_refusal"]

#: how long a refusal's body may take to arrive (gateway seconds)
_READ_S = 1.0


async def read_refusal(
    response: httpx2.Response, clock: Clock
) -> tuple[httpx2.Response, bytes]:
    """The response to hand the SDK and the body to classify it by: read for a 4xx, empty
    for other statuses (a 5xx is the server's whatever it says, and may be a long page)."""
    if not 400 <= response.status_code < 500:
        return response, b""
    try:
        return response, response.content  # read already (a mock, a pre-read body)
    except httpx2.ResponseNotRead:
        pass
    try:
        with anyio.move_on_after(clock.to_real(_READ_S)):
            try:
                return response, await response.aread()
            except httpx2.HTTPError:
                pass
    finally:  # cut, failed or cancelled: its connection goes back (read: closed already)
        with anyio.CancelScope(shield=True):
            await response.aclose()
    headers = [(k, v) for k, v in response.headers.multi_items()
               if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")]
    cut = httpx2.Response(response.status_code, headers=headers, content=b"",
                          request=response.request, extensions=response.extensions)
    return cut, b""
