"""A proxy's HTML error page (a load balancer's or a CDN's 502/504, a login page) is named by
its title in the error, not by its first 200 bytes: a CDN's page opens with a doctype,
conditional comments and meta tags, so the message read ``backend error: <!DOCTYPE html>
<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> …`` and never said 502 or who
answered. Now: ``backend error: an HTML page, not an API answer (a proxy or load balancer in
front?): "example.com | 502: Bad gateway"``."""

from __future__ import annotations

import httpx2
import pytest

import gptgate as gg
from gptgate.wire.html_page import html_title

CDN_PAGE = (
    '<!DOCTYPE html>\n<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> '
    '<![endif]-->\n<!--[if IE 7]>    <html class="no-js ie7 oldie" lang="en-US"> <![endif]-->\n'
    '<!--[if IE 8]>    <html class="no-js ie8 oldie" lang="en-US"> <![endif]-->\n'
    '<!--[if gt IE 8]><!--> <html class="no-js" lang="en-US"> <!--<![endif]-->\n<head>\n'
    '<meta http-equiv="X-UA-Compatible" content="IE=Edge" />\n'
    '<meta name="robots" content="noindex, nofollow" />\n'
    '<meta name="viewport" content="width=device-width,initial-scale=1" />\n'
    "<title>example.com | 502: Bad gateway</title>\n"
    '<link rel="stylesheet" id="cf_styles-css" href="/cdn-cgi/styles/main.css" />\n'
    "</head><body>" + "<div>" * 200 + "Bad gateway</body></html>"
)


def test_the_title_of_a_page() -> None:
    assert html_title(CDN_PAGE.encode()) == "example.com | 502: Bad gateway"
    assert html_title(b"<html><body><h1>504 Gateway Time-out</h1></body></html>") == (
        "504 Gateway Time-out"
    )
    assert html_title(b'{"error": "x"}') is None
    assert html_title(b"upstream connect error or disconnect/reset before headers") is None
    assert html_title(b"<html><title>  a &amp; b\n c </title>") == "a & b c"


@pytest.mark.parametrize("status", [502, 200])
async def test_a_proxy_page_is_named_by_its_title(status: int) -> None:
    def proxy(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers={"content-type": "text/html"}, text=CDN_PAGE)

    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key="EMPTY",
                   transport=httpx2.MockTransport(proxy))
    async with gg.Gateway([b], max_attempts=1) as gate:
        with pytest.raises(gg.BackendError) as caught:
            await gate.chat([{"role": "user", "content": "hi"}])
    message = caught.value.message
    assert '"example.com | 502: Bad gateway"' in message
    assert "a proxy or load balancer in front?" in message
    assert "<!DOCTYPE" not in message
    assert caught.value.status == status


async def test_a_stream_answered_by_a_page_is_the_backends_failure() -> None:
    """A streamed call answered by a 200 HTML page (a proxy's login page) read as a cut stream:
    ``StreamInterruptedError ... stream ended before its final chunk`` — a cut stream is no
    sign the backend is down, so the circuit never opened and every stream paid for it."""
    sent = 0

    def login(request: httpx2.Request) -> httpx2.Response:
        nonlocal sent
        sent += 1
        return httpx2.Response(200, headers={"content-type": "text/html; charset=utf-8"},
                               text="<html><head><title>Sign in - Proxy</title></head></html>")

    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key="EMPTY",
                   transport=httpx2.MockTransport(login))
    gate = gg.Gateway([b], max_attempts=1, breaker_threshold=2, breaker_cooldown_s=60.0,
                      max_breaker_wait_s=0.0)
    async with gate:
        for _ in range(4):
            with pytest.raises(gg.BackendError) as caught:
                async with gate.stream([{"role": "user", "content": "hi"}]) as stream:
                    async for _ in stream:
                        pass
            assert not isinstance(caught.value, gg.StreamInterruptedError)
            assert '"Sign in - Proxy"' in caught.value.message
        assert gate.stats()["b"].circuit == "open"
    assert sent == 2
