"""Server signals against a real llama-server (issue 35): how soon ``concurrency="auto"``
reaches the server's slot count, with ``signals=True`` and without.

Start a server first (``../shared/realserver/start_server.sh PORT``, which passes
``--metrics``; ``PARALLEL=8`` sets 8 slots), then::

    python benchmarks/signals_real.py --base-url http://127.0.0.1:PORT/v1 [--calls 200]
                                      [--submit 32] [--rounds 2]

Each run sends ``--calls`` chat calls, ``--submit`` at a time from the caller's side, through a
gateway with one ``provider="llamacpp"`` backend starting at the default initial limit (4).
After every finished call it samples the backend's limit. Columns: the call at which the limit
first equals the slot count (``/props`` ``total_slots``) and stays there to the end ("never"
when it does not), the share of calls finished while the limit was at the slot count, the
limit's range after call 50, errors, and the server's own peak of busy slots seen by the
reader. Runs alternate (signals off, on, off, on …): the machine is noisy.
"""

from __future__ import annotations

import argparse
import sys

import anyio
import httpx2

import gptgate as gg

PROMPT = "Write one sentence about the sea."


def slot_count(base_url: str) -> int:
    root = base_url.rstrip("/").removesuffix("/v1")
    props = httpx2.get(f"{root}/props", timeout=5.0).json()
    return int(props["total_slots"])


async def run(base_url: str, signals: bool, calls: int, submit: int) -> dict[str, object]:
    backend = gg.Backend(
        name="llama", provider="llamacpp", base_url=base_url, model="tiny",
        concurrency="auto", max_concurrency=64, signals=signals, signals_interval_s=0.5,
        timeout=60.0,
    )
    limits: list[int] = []
    errors = 0
    async with gg.Gateway([backend]) as gate:
        pending = anyio.Semaphore(submit)

        async def one(i: int) -> None:
            nonlocal errors
            async with pending:
                try:
                    await gate.chat(
                        [{"role": "user", "content": f"{PROMPT} ({i})"}], max_tokens=48,
                        scenario="batch_content",
                    )
                except gg.GateError:
                    errors += 1
                limits.append(gate.stats()["llama"].local_limit)

        async with anyio.create_task_group() as tg:
            for i in range(calls):
                tg.start_soon(one, i)
        server = gate.stats()["llama"].server
    return {"limits": limits, "errors": errors, "slots_seen": server.slots_total}


def reached_and_stayed(limits: list[int], slots: int) -> int | None:
    """The 1-based call after which every sampled limit equals ``slots``; None if never."""
    for i in range(len(limits)):
        if all(limit == slots for limit in limits[i:]):
            return i + 1
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--submit", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    slots = slot_count(args.base_url)
    print(f"# python benchmarks/signals_real.py {' '.join(sys.argv[1:])}")
    print(f"# llama-server at {args.base_url}: {slots} slots; {args.calls} calls, "
          f"{args.submit} submitted at a time")
    print("| round | signals | reached slots at call | calls at slots | limit after call 50 "
          "| errors |")
    print("|---|---|---|---|---|---|")
    for n in range(args.rounds):
        for signals in (False, True):
            got = anyio.run(run, args.base_url, signals, args.calls, args.submit)
            limits: list[int] = got["limits"]  # type: ignore[assignment]
            at = reached_and_stayed(limits, slots)
            share = sum(1 for limit in limits if limit == slots) / len(limits)
            late = limits[50:] or limits
            print(f"| {n + 1} | {'on' if signals else 'off'} | {at if at else 'never'} "
                  f"| {share:.0%} | {min(late)}–{max(late)} | {got['errors']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
