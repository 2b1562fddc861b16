"""A scriptable OpenAI-compatible backend for httpx2's MockTransport, shared by gateway tests."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2

import gptgate as gg
from gptgate.limits import Sample


def completion(text: str = "hi there", *, prompt: int = 10, cached: int = 0) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": max(1, len(text) // 4),
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def sse(parts: list[str], *, finish: bool = True, done: bool = True, usage: bool = True) -> bytes:
    chunks: list[dict[str, Any]] = [
        {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    ]
    for i, part in enumerate(parts):
        last = finish and i == len(parts) - 1
        choice = {"index": 0, "delta": {"content": part}, "finish_reason": "stop" if last else None}
        chunks.append({"id": "c", "model": "m", "choices": [choice]})
    if usage and finish:
        chunks.append(
            {
                "id": "c",
                "model": "m",
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": len(parts)},
            }
        )
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    if done:
        body += "data: [DONE]\n\n"
    return body.encode()


Handler = Callable[[httpx2.Request], Awaitable[httpx2.Response] | httpx2.Response]


class Script:
    """Responses handed out in order (the last one repeats); records every request."""

    def __init__(self, *responses: httpx2.Response | Handler) -> None:
        self.responses = list(responses)
        self.requests: list[httpx2.Request] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        index = min(len(self.requests), len(self.responses)) - 1
        item = self.responses[index]
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if isinstance(item, httpx2.Response):
                return _stream_if_asked(request, item)
            result = item(request)
            if not isinstance(result, httpx2.Response):
                result = await result
            return result
        finally:
            self.in_flight -= 1

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def _stream_if_asked(request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
    """Like a real server: a scripted JSON completion is sent as SSE when the call streams."""
    is_json = response.headers.get("content-type", "").startswith("application/json")
    if response.status_code != 200 or not is_json:
        return response
    if not json.loads(request.content).get("stream"):
        return response
    data = json.loads(response.content)
    if "choices" not in data:
        return response
    text = data["choices"][0]["message"]["content"]
    chunks = [
        {
            "id": data["id"],
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}],
        },
        {"id": data["id"], "model": "m", "choices": [], "usage": data["usage"]},
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx2.Response(
        200, content=body.encode(), headers={"content-type": "text/event-stream"}
    )


def ok(text: str = "hi there", **kwargs: Any) -> httpx2.Response:
    return httpx2.Response(200, json=completion(text, **kwargs))


def error(status: int, message: str = "nope", **headers: str) -> httpx2.Response:
    names = {k.replace("_", "-"): v for k, v in headers.items()}
    return httpx2.Response(status, json={"error": {"message": message}}, headers=names)


def stream(parts: list[str], **kwargs: Any) -> httpx2.Response:
    return httpx2.Response(
        200, content=sse(parts, **kwargs), headers={"content-type": "text/event-stream"}
    )


def backend(script: Script, name: str = "mock", **kwargs: Any) -> gg.Backend:
    options: dict[str, Any] = {"concurrency": 4, "timeout": 5.0}
    options.update(kwargs)
    return gg.Backend(
        name=name,
        base_url="http://127.0.0.1:9/v1",
        model=options.pop("model", "m"),
        transport=httpx2.MockTransport(script),
        **options,
    )


def gateway(*backends: gg.Backend, **options: Any) -> gg.Gateway:
    options.setdefault("seed", 1)
    options.setdefault("backoff_base_s", 0.001)
    options.setdefault("backoff_cap_s", 0.01)
    return gg.Gateway(list(backends), **options)


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.001)


USER = [{"role": "user", "content": "hello"}]


class RecordingLimit:
    """A limit that keeps every sample it is fed (and lets ``limit`` calls in)."""

    def __init__(self, limit: int = 10) -> None:
        self.samples: list[Sample] = []
        self._limit = limit

    @property
    def limit(self) -> int:
        return self._limit

    def update(self, sample: Sample, now: float) -> None:
        self.samples.append(sample)
