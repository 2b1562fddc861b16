"""An SDK request whose body is streamed — a file upload's multipart body, which httpx reads
only as it sends it — goes through ``gate.http_client``: the transport sizes a JSON body
(its model, tokens and price) but has none to read here. Before, reading it raised
``httpx.RequestNotRead`` and every ``client.files.create`` (the Batch API's upload) failed."""

from __future__ import annotations

import io

import httpx2
import openai

from tests.mockbackend import Script, backend, gateway


def _stored(request: httpx2.Request) -> httpx2.Response:
    body = request.read()
    assert b'{"custom_id": "1"}' in body  # the upload's bytes reached the server
    return httpx2.Response(200, json={
        "id": "file-1", "object": "file", "bytes": len(body), "created_at": 0,
        "filename": "batch.jsonl", "purpose": "batch", "status": "processed",
    })


async def test_a_file_upload_goes_through_the_gateways_client() -> None:
    script = Script(_stored)
    async with gateway(backend(script)) as gate:
        client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0,
            http_client=gate.http_client("mock"),
        )
        uploaded = await client.files.create(
            file=("batch.jsonl", io.BytesIO(b'{"custom_id": "1"}\n')), purpose="batch"
        )
        assert uploaded.id == "file-1"
        assert len(script.requests) == 1
        assert gate.stats()["mock"].failures == 0
