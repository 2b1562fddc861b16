"""A batch item carrying ``extra_headers`` (the OpenAI SDK's per-request headers, which
``gate.chat`` sends as HTTP headers: a tenant's id, a caller's own key) is refused before
anything is uploaded. A Batch API request line has no headers of its own, so the mapping went
into every request body as a chat parameter — a 400 per item at OpenAI ("Unrecognized request
argument supplied: extra_headers") once the batch had run, and a caller's credential written
into the uploaded file, kept by the provider's Files API."""

from __future__ import annotations

from pathlib import Path

import pytest

import gptgate as gg
from tests.test_batch import Sim, _run
from tests.test_batch_providers import Claude, _claude

SECRET = "Bearer sk-tenant-secret-0123456789"


def _with_headers(n: int) -> list[dict[str, object]]:
    return [{"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 10,
             "extra_headers": {"Authorization": SECRET, "X-Tenant": "t1"}} for i in range(n)]


def test_an_openai_item_with_extra_headers_is_refused_before_the_upload(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match="item 0: extra_headers") as caught:
                await gate.batch(_with_headers(3), job_dir=tmp_path)
            assert "sk-tenant" not in str(caught.value)
            # the same headers given to every item: refused the same way
            items = [{"messages": [{"role": "user", "content": "q"}]}]
            with pytest.raises(gg.BadRequestError, match="item 0: extra_headers"):
                await gate.batch(items, job_dir=tmp_path, extra_headers={"X-Tenant": "t1"})
        assert (sim.batches.uploads, sim.batches.creates) == (0, 0)
        assert not any(b"sk-tenant" in f.data for f in sim.batches.files.values())
        assert not (tmp_path / "job.json").exists()

    _run(body)


def test_an_anthropic_item_with_extra_headers_is_refused_before_the_create(
    tmp_path: Path,
) -> None:
    async def body(sim: Claude) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match="item 0: extra_headers"):
                await gate.batch(_with_headers(3), job_dir=tmp_path)
        assert sim.batches.creates == 0

    _claude(body)
