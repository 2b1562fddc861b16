"""One fleet process, run as its own OS process by the fleet tests (tests/countserver.py
counts what reaches the backend). Imports only ``gptgate``, so a test may run it on another
release's tree (``PYTHONPATH``): a rolling deploy's old and new processes on one namespace.

argv: redis url, namespace, backend base url, concurrency, calls, message prefix. Prints
``ready`` once its gateway is open, waits for a line on stdin, makes the calls at once, prints
``done``, closes. ``FLEET_WALL_OFFSET_S``: this process's wall clock runs that far ahead (a
host with its clock off)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import gptgate as gg


async def main() -> None:
    url, ns, base_url, concurrency, calls, prefix = sys.argv[1:7]
    backend = gg.Backend(
        name="b", base_url=base_url, model="m", concurrency=int(concurrency), timeout=30,
        api_key="sk-test",
    )
    lease_s = float(os.environ.get("FLEET_LEASE_S", "5"))
    shared = gg.Shared(url, namespace=ns, lease_s=lease_s)
    gate = gg.Gateway([backend], shared=shared, seed=1)
    offset = float(os.environ.get("FLEET_WALL_OFFSET_S", "0"))
    if offset:
        gate._fleet_options = {"wall": lambda: time.time() + offset}
    async with gate:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await asyncio.gather(
            *(gate.chat([{"role": "user", "content": f"{prefix} {i} {os.getpid()}"}])
              for i in range(int(calls)))
        )
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
