"""The official ``openai`` SDK failing over: ``gate.http_client("primary", fallback=[...])``.

What it shows
    * an SDK client on ``gate.http_client("gpu-a", fallback=["gpu-b"])`` whose primary is
      down (nothing listens on its port): each request the primary cannot serve — connection
      refused, later its circuit open — is re-sent to ``gpu-b``, rewritten for it (its URL,
      its own key, its model), and booked, limited and traced there;
    * the SDK code is unchanged: the same ``client.chat.completions.create(...)``, no retry
      loop of its own, and ``gate.stats()`` says which backend answered.

How to run
    python examples/sdk_fallback.py

No API key, no network: ``gpu-b`` is ``gptgate sim serve`` started as a child process on a free
loopback port (``gptgate.sim.SimProcess``, 20x faster than real time), ``gpu-a`` a loopback
port nobody listens on. The gateway keeps real time, as in production.
"""

from __future__ import annotations

import asyncio
import socket

import openai

import gptgate as gg
from gptgate.sim import SimProcess

TIME_SCALE = 20.0


def closed_port() -> int:
    """A loopback port nobody listens on: the primary, down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def main(base_url: str) -> None:
    backends = [
        gg.Backend(name="gpu-a", base_url=f"http://127.0.0.1:{closed_port()}/v1",
                   model="model-a", api_key="sk-primary-key"),
        gg.Backend(name="gpu-b", base_url=base_url, model="model-b",
                   api_key="sk-fallback-key"),
    ]
    gate = gg.Gateway(backends)  # real time, as in production: only the server is fast
    client = openai.AsyncOpenAI(
        api_key="sk-primary-key", base_url=str(backends[0].base_url),
        http_client=gate.http_client("gpu-a", fallback=["gpu-b"]),
        max_retries=0,  # the gateway decides where a request goes
    )
    async with gate:
        replies = await asyncio.gather(*(
            client.chat.completions.create(
                model="model-a", max_tokens=20,
                messages=[{"role": "user", "content": f"One fact about {i}, please."}],
            )
            for i in range(10)
        ))
        print(f"first answer -> {(replies[0].choices[0].message.content or '')[:50]!r}")
        stats = gate.stats()
        print(f"fallback     -> {len(replies)} of 10 SDK requests answered: "
              f"gpu-b {stats['gpu-b'].calls - stats['gpu-b'].failures}, "
              f"gpu-a {stats['gpu-a'].calls - stats['gpu-a'].failures}")


if __name__ == "__main__":
    with SimProcess("gpu", time_scale=TIME_SCALE, seed=5) as server:  # `gptgate sim serve`
        print(f"simulator    -> serving {server.base_url}")
        asyncio.run(main(server.base_url))
