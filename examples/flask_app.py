"""A Flask app under a real threaded WSGI server, every request thread calling one
``gg.SyncGateway``: one limit for the whole process, however many threads serve requests.

What it shows
    * one ``SyncGateway`` per process, built at import (as under ``gunicorn --preload`` or
      Flask's app factory) and opened on first use: its event loop runs in one background
      thread, and every request thread's ``gate.chat(...)`` is admitted by the same limiter;
    * ``POST /chat`` ``{"message": "..."}`` -> the answer as JSON (``realtime_chat``);
      ``POST /chat/stream`` -> the answer streamed as it arrives (``gate.stream`` as a plain
      iterator inside Flask's streaming response); ``GET /stats`` -> ``gate.stats()``;
    * 24 concurrent requests through werkzeug's threaded server against a loopback simulator
      that counts what it holds at once: the peak stays at the limit (4), not at 24.

How to run
    python examples/flask_app.py             # drives 24 concurrent requests, prints, stops
    python examples/flask_app.py --serve     # keeps serving on 127.0.0.1:8080
    curl -X POST localhost:8080/chat -H 'content-type: application/json' -d '{"message": "hi"}'

No API key, no network: the model is gptgate's simulator of a GPU server, served over HTTP on
127.0.0.1 (``gptgate.sim.SimServer``), 20x faster than real time. Only the simulator runs on
the scaled clock: the gateway keeps real time, as in production, so its timeouts (an idle
stream's 30 s, an attempt's 60 s) are real seconds, not 1.5 s and 3 s of wall time that a busy
host can miss — which would time out and retry a call the server was still answering.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
from flask import Flask, Response, jsonify, request
from werkzeug.serving import make_server

import gptgate as gg
from gptgate.sim import SimEngine, SimServer

SCALE = 20.0
LIMIT = 4
PRICE = gg.Price(input_per_mtok=1.25, output_per_mtok=10.0)


def make_app(gate: gg.SyncGateway) -> Flask:
    app = Flask(__name__)

    def messages() -> list[dict[str, Any]]:
        body = request.get_json(silent=True) or {}
        return [{"role": "user", "content": str(body.get("message", "hello"))}]

    @app.post("/chat")
    def chat() -> Any:
        result = gate.chat(messages(), scenario="realtime_chat", max_tokens=60)
        return jsonify(text=result.text, backend=result.backend, cost_usd=result.cost_usd)

    @app.post("/chat/stream")
    def chat_stream() -> Response:
        stream = gate.stream(messages(), scenario="realtime_chat", max_tokens=60)

        def body() -> Iterator[str]:
            with stream:  # leaving early (the client went away) hangs up and frees the permit
                yield from stream

        return Response(body(), mimetype="text/plain")

    @app.get("/stats")
    def stats() -> Any:
        s = gate.stats()["gpu-sim"]
        return jsonify(limit=s.limit, in_flight=s.in_flight, calls=s.calls, retries=s.retries,
                       cost_usd=s.cost_usd)

    return app


def drive(requests: int = 24) -> tuple[int, int, dict[str, Any]]:
    """Serve the app on a free loopback port with werkzeug's threaded server and send it
    ``requests`` requests at once (a third of them streamed); returns how many were
    answered, the simulator's peak in flight and the app's ``/stats``."""
    engine = SimEngine("gpu", clock=gg.ScaledClock(SCALE), seed=7)
    with SimServer(engine, time_scale=SCALE) as base_url:
        backend = gg.Backend(name="gpu-sim", base_url=base_url, model="m", concurrency=LIMIT,
                             price=PRICE)
        gate = gg.SyncGateway([backend], seed=7)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        server = make_server("127.0.0.1", 0, make_app(gate), threaded=True)
        serving = threading.Thread(target=server.serve_forever, daemon=True)
        serving.start()
        url = f"http://127.0.0.1:{server.server_port}"
        try:
            with httpx2.Client(base_url=url, timeout=60.0) as client:

                def one(i: int) -> bool:
                    path = "/chat/stream" if i % 3 == 0 else "/chat"
                    reply = client.post(path, json={"message": f"question {i}"})
                    return reply.status_code == 200 and bool(reply.text)

                with ThreadPoolExecutor(requests) as pool:
                    answered = sum(pool.map(one, range(requests)))
                stats = client.get("/stats").json()
        finally:
            server.shutdown()
            serving.join()
            gate.close()
        return answered, engine.ledger.snapshot().peak_in_flight, stats


def serve(port: int) -> None:
    engine = SimEngine("gpu", clock=gg.ScaledClock(SCALE), seed=7)
    with SimServer(engine, time_scale=SCALE) as base_url:
        backend = gg.Backend(name="gpu-sim", base_url=base_url, model="m", concurrency=LIMIT,
                             price=PRICE)
        with gg.SyncGateway([backend]) as gate:
            print(f"serving on http://127.0.0.1:{port} (Ctrl-C stops)")
            make_server("127.0.0.1", port, make_app(gate), threaded=True).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="keep serving on --port")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    if args.serve:
        serve(args.port)
        return
    answered, peak, stats = drive()
    print(f"flask: {answered}/24 requests answered by {stats['calls']} gateway calls, "
          f"${stats['cost_usd']:.4f}")
    verdict = "held" if peak <= LIMIT else "EXCEEDED"
    print(f"peak in flight at the server: {peak} / limit {LIMIT} [{verdict}]")


if __name__ == "__main__":
    main()
