"""An SDK call on ``gate.http_client`` that fails is one failed call in the ledger
(``calls_failed``), as a failed ``gate.chat`` is: its requests are attempts, its retries
(the SDK's own, ``x-stainless-retry-count`` > 0) none of them a new call."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import anthropic
import anyio
import openai
import pytest

import gptgate as gg
from benchmarks._threadserver import QuietHandler, served
from tests.test_sdk_failover import dead_url

KEY = "sk-test-0123456789abcdef"
USER = [{"role": "user", "content": "hi"}]
ERROR = {"error": {"message": "the server had an error", "type": "server_error"}}
ANSWER = {
    "id": "c", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


@contextmanager
def failing(*, fail_first: int | None = None, cut: bool = False) -> Iterator[list[str]]:
    """A server answering 500 (a retry-after-ms of 1: the SDK's retries come at once), or
    with ``fail_first=n`` its first n requests 500 and the rest an answer; ``cut``: a stream
    torn after its first event. Yields the retry counts it saw, its URL last."""
    seen: list[str] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            seen.append(self.headers.get("x-stainless-retry-count", "-"))
            if cut and body.get("stream"):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m",
                         "choices": [{"index": 0, "delta": {"content": "first "},
                                      "finish_reason": None}]}
                event = f"data: {json.dumps(chunk)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            ok = fail_first is not None and len(seen) > fail_first
            raw = json.dumps(ANSWER if ok else ERROR).encode()
            self.send_response(200 if ok else 500)
            self.send_header("content-type", "application/json")
            self.send_header("retry-after-ms", "1")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    with served(Handler) as root:
        seen.append(f"{root}/v1")
        yield seen


def _gate(url: str) -> gg.Gateway:
    return gg.Gateway(
        [gg.Backend(name="a", base_url=url, model="m", api_key=KEY,
                    price=gg.Price(input_per_mtok=1.0, output_per_mtok=2.0))],
        breaker_threshold=100, max_attempts=2, retry_budget_ratio=None,
    )


def _sdk(gate: gg.Gateway, url: str, retries: int) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=KEY, base_url=url, max_retries=retries,
                              http_client=gate.http_client("a"))


async def _sdk_failing(gate: gg.Gateway, url: str, *, retries: int, calls: int) -> None:
    """``calls`` SDK calls, each failing with the server's 500."""
    sdk = _sdk(gate, url, retries=retries)
    for _ in range(calls):
        with pytest.raises(openai.InternalServerError):
            await sdk.chat.completions.create(model="m", messages=USER)


async def test_three_failed_sdk_calls_are_three_failed_calls_as_gate_chats() -> None:
    with failing() as seen:
        url = seen.pop()
        async with _gate(url) as gate:
            await _sdk_failing(gate, url, retries=1, calls=3)
            sdk_entry = gate.ledger.entries["a"]
            assert seen == ["0", "1"] * 3
            assert (sdk_entry.calls_ok, sdk_entry.calls_failed) == (0, 3)
            sdk_stats = gate.stats()["a"]
        async with _gate(url) as gate:
            for _ in range(3):
                with pytest.raises(gg.GateError):
                    await gate.chat(USER)
            chat_entry = gate.ledger.entries["a"]
            chat_stats = gate.stats()["a"]
    # the same ledger as gate.chat's: 3 calls failed, 6 requests sent, no model ran
    assert (chat_entry.calls_ok, chat_entry.calls_failed) == (0, 3)
    assert sdk_entry == chat_entry
    assert sdk_stats.calls == chat_stats.calls == 6
    assert sdk_stats.failures == chat_stats.failures


async def test_a_call_that_fails_then_succeeds_on_its_retry_is_no_failed_call() -> None:
    with failing(fail_first=1) as seen:
        url = seen.pop()
        async with _gate(url) as gate:
            sdk = _sdk(gate, url, retries=2)
            answer = await sdk.chat.completions.create(model="m", messages=USER)
            assert answer.choices[0].message.content == "ok"
            await sdk.chat.completions.create(model="m", messages=USER)
            entry = gate.ledger.entries["a"]
    assert seen == ["0", "1", "0"]
    assert (entry.calls_ok, entry.calls_failed) == (2, 0)


async def test_without_sdk_retries_each_failed_request_is_a_failed_call() -> None:
    with failing() as seen:
        url = seen.pop()
        async with _gate(url) as gate:
            await _sdk_failing(gate, url, retries=0, calls=2)
            entry = gate.ledger.entries["a"]
    assert (entry.calls_ok, entry.calls_failed) == (0, 2)


async def test_a_stream_cut_by_a_dead_backend_is_a_failed_call() -> None:
    with failing(cut=True) as seen:
        url = seen.pop()
        async with _gate(url) as gate:
            sdk = _sdk(gate, url, retries=0)
            with pytest.raises(openai.APIError):
                stream = await sdk.chat.completions.create(
                    model="m", messages=USER, stream=True
                )
                async for _ in stream:
                    pass
            entry = gate.ledger.entries["a"]
            assert entry.interrupted_streams == 1
    assert (entry.calls_ok, entry.calls_failed) == (0, 1)


async def test_concurrent_identical_calls_count_one_failed_call_each() -> None:
    """Retries matched by their request and retry count: 4 identical calls at once, each
    retried twice, are 4 failed calls whichever retry follows whose failure."""
    with failing() as seen:
        url = seen.pop()
        async with _gate(url) as gate:
            sdk = _sdk(gate, url, retries=2)

            async def call() -> None:
                with pytest.raises(openai.InternalServerError):
                    await sdk.chat.completions.create(model="m", messages=USER)

            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(call)
            entry = gate.ledger.entries["a"]
    assert sorted(seen) == ["0"] * 4 + ["1"] * 4 + ["2"] * 4
    assert (entry.calls_ok, entry.calls_failed) == (0, 4)


async def test_a_failover_to_a_failing_fallback_is_one_failed_call() -> None:
    """The primary dead, its fallback answering 500: each SDK call is one failed call (at
    the fallback, whose answer was the call's end), not one per backend tried."""
    with failing() as seen, dead_url() as dead:
        url = seen.pop()
        async with gg.Gateway(
            [gg.Backend(name="a", base_url=dead, model="m", api_key=KEY),
             gg.Backend(name="b", base_url=url, model="m", api_key=KEY)],
            breaker_threshold=100, retry_budget_ratio=None,
        ) as gate:
            sdk = openai.AsyncOpenAI(api_key=KEY, base_url=dead, max_retries=1,
                                     http_client=gate.http_client("a", fallback=["b"]))
            for _ in range(2):
                with pytest.raises(openai.InternalServerError):
                    await sdk.chat.completions.create(model="m", messages=USER)
            failed = {name: e.calls_failed for name, e in gate.ledger.entries.items()}
    assert seen == ["0", "1"] * 2
    assert failed == {"a": 0, "b": 2}


async def test_a_guarded_sdk_call_is_its_guards_one_failed_call() -> None:
    with failing() as seen:
        url = seen.pop()
        async with _gate(url) as gate:
            sdk = _sdk(gate, url, retries=1)

            @gate.guard(backend="a", retry=False)
            async def ask() -> object:
                return await sdk.chat.completions.create(model="m", messages=USER)

            with pytest.raises(openai.InternalServerError):
                await ask()
            entry = gate.ledger.entries["a"]
    assert (entry.calls_ok, entry.calls_failed) == (0, 1)


async def test_anthropics_sdk_retries_are_matched_too() -> None:
    with failing() as seen:
        url = seen.pop()
        async with gg.Gateway(
            [gg.Backend(name="a", base_url=url.removesuffix("/v1"), model="m", api_key=KEY,
                        provider="anthropic")],
            breaker_threshold=100, retry_budget_ratio=None,
        ) as gate:
            sdk = anthropic.AsyncAnthropic(api_key=KEY, base_url=url.removesuffix("/v1"),
                                           max_retries=1, http_client=gate.http_client("a"))
            for _ in range(2):
                with pytest.raises(anthropic.InternalServerError):
                    await sdk.messages.create(model="m", max_tokens=8, messages=USER)
            entry = gate.ledger.entries["a"]
    assert seen == ["0", "1"] * 2
    assert (entry.calls_ok, entry.calls_failed) == (0, 2)


async def test_a_client_that_says_no_retry_count_fails_a_call_per_request() -> None:
    with failing() as seen:
        url = seen.pop()
        async with _gate(url) as gate:
            client = gate.http_client("a")
            for _ in range(2):
                response = await client.post(
                    f"{url}/chat/completions", json={"model": "m", "messages": USER},
                    headers={"authorization": f"Bearer {KEY}"},
                )
                assert response.status_code == 500
            entry = gate.ledger.entries["a"]
            assert not gate.runner.sdk_calls._failed  # nothing waits for a retry it can't tell
    assert seen == ["-", "-"]
    assert (entry.calls_ok, entry.calls_failed) == (0, 2)
