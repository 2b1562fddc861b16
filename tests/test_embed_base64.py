"""``gate.embed(texts, encoding_format="base64")``: OpenAI answers each vector as the base64 of
its little-endian float32s (what the official SDK asks for by default, and decodes with
``np.frombuffer(base64.b64decode(data), dtype="float32")``). Before, gptgate took that paid
answer for a malformed one — a retryable ``BackendError`` — and sent the request again, paying
each time, to end in that error. Now the vectors are decoded: one request, the floats."""

from __future__ import annotations

import base64
import json
import struct

import httpx2

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimTransport, run_virtual
from gptgate.sim.embeddings import vector_for

DIMS = 8


class Base64Embeddings(httpx2.AsyncBaseTransport):
    """The simulator, answering an ``encoding_format: base64`` request as OpenAI does."""

    def __init__(self, engine: SimEngine) -> None:
        self.inner = SimTransport(engine)
        self.requests = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if not request.url.path.endswith("/embeddings"):
            return response
        self.requests += 1
        asked = json.loads(request.content).get("encoding_format")
        body = json.loads(await response.aread())
        if asked == "base64":
            for item in body["data"]:
                packed = struct.pack(f"<{len(item['embedding'])}f", *item["embedding"])
                item["embedding"] = base64.b64encode(packed).decode()
        return httpx2.Response(response.status_code, json=body)


def _float32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def test_base64_vectors_are_decoded_not_retried_as_malformed() -> None:
    async def main() -> None:
        clock = LoopClock()
        engine = SimEngine("gpu", clock=clock, seed=1)
        transport = Base64Embeddings(engine)
        backend = gg.Backend(
            name="emb", base_url="http://127.0.0.1:8000/v1", model="chat-model",
            embedding_model="text-embedding-3-small", price=gg.Price(input_per_mtok=0.02),
            transport=transport,
        )
        async with gg.Gateway([backend], clock=clock, max_attempts=3) as gate:
            texts = ["alpha", "beta", "gamma"]
            vectors = await gate.embed(texts, encoding_format="base64")
            assert transport.requests == 1
            assert vectors == [_float32(vector_for(t, DIMS)) for t in texts]
            one = await gate.embed("delta", encoding_format="base64")
            assert one == _float32(vector_for("delta", DIMS))
            assert transport.requests == 2
            assert gate.ledger.entries["emb"].cost_usd > 0

    run_virtual(main)
