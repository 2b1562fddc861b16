"""A streaming chat endpoint: a small Starlette (ASGI) app served by uvicorn, each answer
streamed to the browser through ``gate.stream(..., scenario="realtime_chat")``.

What it shows
    * one ``Gateway`` per app, opened and closed by the app's lifespan (``async with gate``:
      closing gives streams in flight a grace period, then ends them cleanly);
    * ``POST /chat`` ``{"message": "..."}`` -> the answer as server-sent events, token by
      token, under the ``realtime_chat`` preset (a person waits: high priority, streamed,
      prompt-cache warm-up); a client that disconnects cancels its stream and frees its
      permit at once;
    * ``GET /stats`` -> ``gate.stats()`` as JSON, for a dashboard.

How to run
    python examples/streaming_endpoint.py            # serves 3 requests from its own client,
                                                     # prints them, stops
    python examples/streaming_endpoint.py --serve    # keeps serving on 127.0.0.1:8080
    curl -N -X POST localhost:8080/chat -d '{"message": "hello"}'

No API key, no network: the model is gptgate's simulator of a GPU server, in-process, 10x
faster than real time (``ScaledClock(10)``). The server listens on loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import gptgate as gg
from gptgate.sim import SimEngine, SimTransport

CLOCK = gg.ScaledClock(10)  # the simulated server and the gateway share one time base


def make_gateway() -> gg.Gateway:
    backend = gg.Backend(
        name="gpu-sim", base_url="http://127.0.0.1:8000/v1", model="gpt-5.5", hardware="gpu",
        price=gg.Price(input_per_mtok=1.25, output_per_mtok=10.0),
        transport=SimTransport(SimEngine("gpu", clock=CLOCK, seed=21)),
    )
    return gg.Gateway([backend], clock=CLOCK, seed=21)


def make_app(gate: gg.Gateway) -> Starlette:
    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
            message = str(body["message"])
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": 'send {"message": "..."}'}, status_code=400)

        async def events() -> AsyncIterator[str]:
            messages = [{"role": "user", "content": message}]
            try:
                async with gate.stream(messages, scenario="realtime_chat", max_tokens=60) as s:
                    async for text in s:
                        yield f"data: {json.dumps({'text': text})}\n\n"
                result = s.result
                yield f"data: {json.dumps({'done': True, 'cost_usd': result.cost_usd})}\n\n"
            except gg.GateError as error:  # typed, with no key in it: safe to show
                yield f"data: {json.dumps({'error': type(error).__name__})}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def stats(request: Request) -> Response:
        return JSONResponse({
            name: {"limit": s.limit, "in_flight": s.in_flight, "calls": s.calls,
                   "ttft_p50_s": s.ttft_p50_s, "cost_usd": s.cost_usd}
            for name, s in gate.stats().items()
        })

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with gate:  # opened with the app, closed (with a grace) when it stops
            yield

    return Starlette(
        routes=[Route("/chat", chat, methods=["POST"]), Route("/stats", stats)],
        lifespan=lifespan,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def ask(client: httpx2.AsyncClient, question: str) -> str:
    """What a browser would do: POST, then read the events as they come."""
    started, first, parts = time.perf_counter(), None, []
    async with client.stream("POST", "/chat", json={"message": question}) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: "):])
            if "text" in event:
                first = first if first is not None else time.perf_counter() - started
                parts.append(event["text"])
            elif "error" in event:
                return f"{question!r}: failed ({event['error']})"
    return (f"{question!r}: {len(parts)} events, first after {1000 * (first or 0):.0f} ms "
            f"-> {''.join(parts)[:40]!r}")


async def demo(port: int) -> None:
    """Serve, send three streaming requests from our own client, print them, stop."""
    server = uvicorn.Server(uvicorn.Config(
        make_app(make_gateway()), host="127.0.0.1", port=port, log_level="warning",
    ))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():  # it failed to start: show why
            await serving
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.02)
    print(f"serving http://127.0.0.1:{port}  (POST /chat, GET /stats)")
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as client:
        questions = ["What is a token?", "Why stream answers?", "What is a prompt cache?"]
        for line in await asyncio.gather(*(ask(client, q) for q in questions)):
            print(f"streamed {line}")
        stats = (await client.get("/stats")).json()["gpu-sim"]
        print(f"GET /stats -> {stats['calls']} calls, limit {stats['limit']}, "
              f"${stats['cost_usd']:.5f}")
    server.should_exit = True
    await serving


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A streaming chat endpoint on gptgate.")
    parser.add_argument("--serve", action="store_true", help="keep serving until Ctrl-C")
    parser.add_argument("--port", type=int, default=None, help="default: 8080 with --serve, "
                        "else a free port")
    args = parser.parse_args()
    if args.serve:
        uvicorn.run(make_app(make_gateway()), host="127.0.0.1", port=args.port or 8080)
    else:
        asyncio.run(demo(args.port or free_port()))
