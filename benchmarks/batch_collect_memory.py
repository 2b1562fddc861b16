"""How much memory collecting a batch job takes, against the size of its results.

A job's results are read back from the provider's output file: at 50,000 requests a part
(OpenAI's limit) that file runs to hundreds of megabytes. The simulator is served by
``gptgate sim serve`` in a child process over loopback HTTP, so ``tracemalloc`` counts the
client only; the peak is taken over ``job.wait()`` (poll, download, merge, book). Columns:
items, the output file's size as the provider serves it, what is still allocated once
``wait()`` returned (the results it returns, mostly), the client's peak allocation during
``wait()``, and the ratio of the peak to the file (lower is better; the results themselves,
``ChatResult`` objects with the provider's raw answer, are what ``wait()`` must return).

    python benchmarks/batch_collect_memory.py [--items 2000 8000] [--max-tokens 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tracemalloc
from typing import Any

import anyio
import httpx2

import gptgate as gg


def _serve() -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "gptgate", "sim", "serve", "--profile", "hosted", "--port",
         "0", "--json", "--time-scale", "1000", "--batch-complete-s", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    line = json.loads(process.stdout.readline())
    return process, str(line.get("base_url") or line.get("url"))


def _items(n: int, max_tokens: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"Summarise support ticket #{i}."}],
             "max_tokens": max_tokens} for i in range(n)]


async def _run(base_url: str, n: int, max_tokens: int) -> tuple[int, int, int]:
    backend = gg.Backend(name="oa", base_url=base_url, model="sim-hosted", api_key="sk-sim",
                         price=gg.Price(input_per_mtok=2.0, output_per_mtok=8.0))
    with tempfile.TemporaryDirectory() as job_dir:
        async with gg.Gateway([backend]) as gate:
            job = await gate.batch(_items(n, max_tokens), job_dir=job_dir, poll_s=0.2)
            tracemalloc.start()
            tracemalloc.reset_peak()
            results = await job.wait()
            held, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert sum(isinstance(r, gg.ChatResult) for r in results) == n
            async with httpx2.AsyncClient(base_url=base_url) as client:
                part = job.record.parts[0] if job.record is not None else None
                assert part is not None and part.output_file_id is not None
                size = len((await client.get(f"/files/{part.output_file_id}/content")).content)
    return size, held, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[2000, 8000])
    parser.add_argument("--max-tokens", type=int, default=200)
    args = parser.parse_args()
    print(f"$ python benchmarks/batch_collect_memory.py --items "
          f"{' '.join(map(str, args.items))} --max-tokens {args.max_tokens}")
    process, base_url = _serve()
    try:
        print(f"{'items':>7} {'output file MB':>15} {'results held MB':>16} "
              f"{'peak in wait() MB':>18} {'peak/file':>10}")
        for n in args.items:
            size, held, peak = anyio.run(_run, base_url, n, args.max_tokens)
            print(f"{n:>7} {size / 1e6:>15.1f} {held / 1e6:>16.1f} {peak / 1e6:>18.1f} "
                  f"{peak / size:>9.2f}x")
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    main()
