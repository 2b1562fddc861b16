"""How far the ledger's booking of a cut SDK stream is from the server's bill, cut by cut.

The openai SDK on ``gate.http_client`` streams from a ``gptgate sim serve`` process (real
HTTP, loopback); each caller reads ``k`` content chunks (drawn 1-12), then ``break`` and
``close()``, or drops the stream (``break`` alone, hung up by gptgate). The server bills the
tokens it generated until it noticed the disconnect; the ledger books what arrived plus its
estimate of the rest, marked uncertain. Per cut: bill - booked (tokens), and whether the bill
lies in the ledger's band [booked - uncertain, booked].

    python benchmarks/sdk_cut_bill.py [--streams 60] [--seed 1] [--profile gpu] [--how close|drop]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics

import openai

import gptgate as gg
from gptgate.sim.process import SimProcess


async def run(args: argparse.Namespace, server: SimProcess) -> list[tuple[str, int, int, int]]:
    rng = random.Random(args.seed)
    price = gg.Price(input_per_mtok=1.0, output_per_mtok=2.0)
    backend = gg.Backend(name="sim", base_url=server.base_url, model="sim-model", price=price,
                         api_key="sk-sim", max_concurrency=4)
    rows: list[tuple[str, int, int, int]] = []
    async with gg.Gateway([backend], seed=args.seed) as gate:
        sdk = openai.AsyncOpenAI(api_key="sk-sim", base_url=server.base_url, max_retries=0,
                                 http_client=gate.http_client("sim"))
        for i in range(args.warm + args.streams):
            k = rng.randint(1, 12)
            how = "whole" if i < args.warm else rng.choice(args.how.split(","))
            before = gate.ledger.total()
            stream = await sdk.chat.completions.create(
                model="sim-model", stream=True, max_tokens=args.max_tokens,
                messages=[{"role": "user", "content": f"question {i}: tell me a story"}],
            )
            read = 0
            async for chunk in stream:
                read += bool(chunk.choices and chunk.choices[0].delta.content)
                if how != "whole" and read >= k:
                    break
            if how == "close":
                await stream.close()
            del stream
            gc.collect()
            await asyncio.sleep(args.settle)
            after = gate.ledger.total()
            booked = after.output_tokens - before.output_tokens
            uncertain = after.uncertain_tokens - before.uncertain_tokens
            rows.append((how, read, booked, uncertain))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--streams", type=int, default=60)
    parser.add_argument("--warm", type=int, default=5, help="whole streams first (the pace)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--how", default="close", help="close,drop: how each is cut")
    parser.add_argument("--settle", type=float, default=0.5, help="real s after each cut")
    args = parser.parse_args()
    with SimProcess(args.profile, seed=args.seed, request_bills=True) as server:
        rows = asyncio.run(run(args, server))
        bills = server.request_bills()
    bills = [b for b in bills if b.prompt.startswith("question ")]
    assert len(bills) == len(rows), (len(bills), len(rows))
    under, outside = [], 0
    print("how   read booked uncertain bill  bill-booked")
    for (how, read, booked, uncertain), bill in list(zip(rows, bills, strict=True))[args.warm:]:
        diff = bill.output_tokens - booked
        under.append(diff)
        inside = booked - uncertain <= bill.output_tokens <= booked
        outside += not inside
        print(f"{how:5s} {read:4d} {booked:6d} {uncertain:9d} {bill.output_tokens:5d} "
              f"{diff:+6d}{'' if inside else '  outside the band'}")
    print(f"\n{len(under)} cuts: bill - booked median {statistics.median(under):+.0f}, "
          f"min {min(under):+d}, max {max(under):+d}; booked below the bill in "
          f"{sum(d > 0 for d in under)}; bill outside [booked - uncertain, booked] in {outside}")


if __name__ == "__main__":
    main()
