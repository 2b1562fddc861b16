"""``gptgate demo``: the concurrency U-curve on the built-in simulator, in seconds, no key.

1,000 requests per level at 1, 5, 10, 20, 30, 50 and 80 concurrent calls reproduce the
shape of the field measurement (throughput near-linear to ~30, flat to 50, falling at 80,
tokens and cost rising past the knee), then the same job with concurrency="auto" shows
where gptgate's adaptive limit lands without being told. --base-url runs it against a
real endpoint.
"""

from __future__ import annotations

import argparse
import os

from .common import Command, UsageError, positive_int
from .measure import Target, parse_levels, workload
from .report import DEMO_COLUMNS
from .sweep import (
    add_provider_argument,
    add_target_arguments,
    measure,
    parse_price,
    print_outcome,
)

__all__ = ["COMMAND"]

DEFAULT_LEVELS = "1,5,10,20,30,50,80,auto"
OPENAI_URL = "https://api.openai.com/v1"

EXAMPLES = """\
examples:
  gptgate demo                          # 1,000 requests per level on the simulator (~10 s)
  gptgate demo --levels 10,30,50,auto --requests 300
  gptgate demo --base-url http://127.0.0.1:8000/v1 --requests 50   # gptgate sim serve
  OPENAI_API_KEY=... gptgate demo --real --model gpt-4o-mini --requests 20

exit codes: 0 done, 1 the run failed (the endpoint answered no call), 2 bad usage,
130 interrupted (Ctrl-C; the levels measured so far are printed)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=positive_int, default=1000, metavar="N",
                        help="requests per level (default: 1000)")
    parser.add_argument("--levels", default=DEFAULT_LEVELS, metavar="LIST",
                        help=f"fixed concurrencies, comma-separated; 'auto': the adaptive limit, "
                        f"measured last (default: {DEFAULT_LEVELS})")
    parser.add_argument("--profile", default="hosted",
                        help="simulator profile: hosted, tpu, gpu, cpu, llamacpp "
                        "(default: hosted)")
    parser.add_argument("--model", default="gpt-5.5", help="model name (default: gpt-5.5)")
    parser.add_argument("--base-url", metavar="URL",
                        help="a real OpenAI-compatible endpoint instead of the simulator "
                        "(key from OPENAI_API_KEY, if set)")
    add_provider_argument(parser)
    parser.add_argument("--real", action="store_true",
                        help=f"call {OPENAI_URL} (needs OPENAI_API_KEY)")
    add_target_arguments(parser)


def run(args: argparse.Namespace) -> int:
    base_url = args.base_url
    if args.real:
        if base_url is not None:
            raise UsageError("--real calls api.openai.com: give it or --base-url, not both")
        if not os.environ.get("OPENAI_API_KEY"):
            raise UsageError("--real needs OPENAI_API_KEY set (the demo never falls back to "
                             "the simulator)")
        base_url = OPENAI_URL
    price = parse_price(args.price)
    if base_url is None:
        target = Target(model=args.model, profile=args.profile, price=price,
                        provider=args.provider)
    else:
        target = Target(model=args.model, base_url=base_url, price=price,
                        provider=args.provider)
    levels = parse_levels(args.levels)
    items = workload(args.requests, args.seed)
    sweep = measure("demo", target, levels, items, args)
    return print_outcome(sweep, DEMO_COLUMNS, as_json=args.json)


COMMAND = Command(
    name="demo",
    summary="the concurrency U-curve on the simulator, in seconds, no key",
    description=__doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
    add_arguments=add_arguments,
    run=run,
    examples=EXAMPLES,
)
