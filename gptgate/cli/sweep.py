"""``gptgate sweep``: measure your own U-curve and keep it (sweep.csv, sweep.png)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config import Price
from .common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Command,
    RunFailed,
    UsageError,
    add_json_flag,
    out_problem,
    positive_float,
    positive_int,
    print_json,
)
from .measure import Level, Sweep, Target, load_prompts, parse_levels, run_sweep, workload
from .progress import SweepProgress
from .report import SWEEP_COLUMNS, Column, format_table, summary, sweep_dict, write_csv

__all__ = ["COMMAND", "banner", "measure", "parse_price", "print_outcome"]

DEFAULT_CONCURRENCY = "1,5,10,20,30,50,80"

EXAMPLES = """\
examples:
  # the U-curve of the built-in 'hosted' simulator (no key, no network)
  gptgate sweep --sim hosted --requests 300 --out runs/hosted

  # a real endpoint: the key is read from $OPENAI_API_KEY
  gptgate sweep --base-url https://api.openai.com/v1 --model gpt-4o-mini \\
      --concurrency 1,5,10,20 --requests 100 --prompt-file prompts.txt --out runs/openai

  # a local simulator over HTTP, in another terminal: gptgate sim serve --port 8000
  gptgate sweep --base-url http://127.0.0.1:8000/v1 --model sim --requests 50 --out runs/local

Writes DIR/sweep.csv (one row per level) and DIR/sweep.png (throughput, p50/p99 latency and
cost per call against concurrency, the knee marked). Ctrl-C stops the sweep, writes the
levels measured so far and exits 130.

exit codes: 0 done, 1 the run failed (the endpoint answered no call), 2 bad usage,
130 interrupted
"""


def parse_price(text: str) -> Price:
    """``"IN,CACHED,OUT"`` dollars per million tokens, or one number for all three."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3:
        raise UsageError("--price is IN,CACHED,OUT dollars per million tokens (or one number)")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise UsageError(f"--price: {text!r} is not numbers") from None
    if any(not v >= 0 or v == float("inf") for v in values):
        raise UsageError("--price: prices must be finite and >= 0")
    return Price(input_per_mtok=values[0], cached_input_per_mtok=values[1],
                 output_per_mtok=values[2])


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--price",
        default="10",
        metavar="IN,CACHED,OUT",
        help="dollars per million input, cached input and output tokens, or one number for "
        "all three (default: 10, the field measurement's $21.50 for 2.15 M tokens)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seeds the simulator (default: 7)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_json_flag(parser)


def add_provider_argument(parser: argparse.ArgumentParser) -> None:
    """``--provider``: the preset ``--base-url`` is called with (``demo`` and ``sweep``)."""
    parser.add_argument("--provider", default="openai", metavar="NAME",
                        help="the server behind --base-url, as Backend(provider=...) names it: "
                        "llamacpp, vllm, azure, ... (default: openai; docs/providers.md)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--sim", metavar="PROFILE",
                       help="the built-in simulator, in-process and in simulated time: hosted, "
                       "tpu, gpu, cpu or llamacpp")
    where.add_argument("--base-url", metavar="URL",
                       help="an OpenAI-compatible endpoint, e.g. https://api.openai.com/v1")
    parser.add_argument("--model", help="the model to ask (required with --base-url)")
    parser.add_argument("--api-key-env", metavar="VAR",
                        help="the environment variable holding the key (default: the "
                        "provider's, OPENAI_API_KEY for openai; unset: no Authorization header)")
    add_provider_argument(parser)
    parser.add_argument("--concurrency", default=DEFAULT_CONCURRENCY, metavar="LIST",
                        help=f"fixed levels, comma-separated (default: {DEFAULT_CONCURRENCY}); "
                        "'auto' (gptgate's adaptive limit) is measured last")
    parser.add_argument("--no-auto", action="store_true",
                        help="do not add the 'auto' row")
    parser.add_argument("--requests", type=positive_int, default=200, metavar="N",
                        help="requests per level (default: 200)")
    parser.add_argument("--prompt-file", metavar="FILE",
                        help="one prompt per line, or one JSON object of chat arguments per "
                        "line; used round-robin (default: a 2,150-token review job)")
    parser.add_argument("--max-tokens", type=positive_int, default=400, metavar="M",
                        help="answer cap per call (default: 400)")
    parser.add_argument("--stream", action="store_true",
                        help="stream every call (measures time to first token)")
    parser.add_argument("--scenario", default="batch_content",
                        help="the preset the job runs under: its stream rule, micro-batching "
                        "and cache ramp (default: batch_content, a bulk job)")
    parser.add_argument("--timeout", type=positive_float, default=60.0, metavar="S",
                        help="per-attempt timeout in seconds (default: 60)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="where sweep.csv and sweep.png go (created if missing)")
    parser.add_argument("--no-plot", action="store_true",
                        help="write sweep.csv only (no matplotlib needed)")
    add_target_arguments(parser)


def banner(command: str, target: Target, requests: int) -> str:
    seconds = (
        "times are in the simulator's simulated seconds (the run takes far less wall time)"
        if target.simulated
        else "times are wall-clock seconds"
    )
    return (
        f"gptgate {command}: {requests} requests per level against {target.describe()}\n"
        "a fixed concurrency per level (auto: gptgate's adaptive limit), up to 5 attempts per "
        f"call, no retry budget;\n{seconds}\n"
    )


def measure(
    command: str,
    target: Target,
    levels: Sequence[Level],
    items: Sequence[dict[str, Any]],
    args: argparse.Namespace,
) -> Sweep:
    """Check the target, print the banner, run the sweep with a progress bar."""
    target.check()
    if not args.json:
        print(banner(command, target, len(items)), flush=True)
    progress = None if args.quiet or args.json else SweepProgress(len(levels))
    try:
        return run_sweep(target, levels, items, seed=args.seed, on_progress=progress)
    finally:
        if progress is not None:
            progress.close()


def print_outcome(
    sweep: Sweep,
    columns: Sequence[Column],
    *,
    as_json: bool,
    files: Mapping[str, str | None] | None = None,
) -> int:
    """Print the table (or JSON) of what was measured and the files written, and say how the
    run ended. A run where no call completed is one line saying why (exit 1), no table of
    empty rows."""
    if sweep.failure is not None:
        raise RunFailed(sweep.failure)
    written = dict(files or {})
    if as_json:
        print_json({**sweep_dict(sweep), **written})
    elif sweep.rows:
        print(format_table(sweep.rows, columns))
        text = "\n".join(textwrap.fill(line, 100) for line in summary(sweep.rows).splitlines())
        print(f"\n{text}" if text else "")
        for path in written.values():
            if path:
                print(f"wrote {path}")
        print(f"(wall time {sweep.wall_s:.1f}s)")
    for warning in sweep.warnings:
        print(f"gptgate: {warning}", file=sys.stderr)
    if sweep.interrupted:
        print(f"gptgate: interrupted; {len(sweep.rows)} of {len(sweep.levels)} levels measured",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def target_from(args: argparse.Namespace) -> Target:
    price = parse_price(args.price)
    if args.sim is not None:
        from ..sim import get_profile

        try:
            model = args.model or get_profile(args.sim).model
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
        return Target(model=model, profile=args.sim, price=price, timeout_s=args.timeout,
                      scenario=args.scenario, provider=args.provider)
    if not args.model:
        raise UsageError("--base-url needs --model (the model name the endpoint serves)")
    return Target(model=args.model, base_url=args.base_url, price=price,
                  api_key_env=args.api_key_env, timeout_s=args.timeout, scenario=args.scenario,
                  provider=args.provider)


def run(args: argparse.Namespace) -> int:
    target = target_from(args)
    levels = parse_levels(args.concurrency, append_auto=not args.no_auto)
    prompts = load_prompts(args.prompt_file) if args.prompt_file else None
    items = workload(args.requests, args.seed, prompts=prompts, max_tokens=args.max_tokens,
                     stream=args.stream)
    out = Path(args.out)
    if (problem := out_problem(out, directory=True)) is not None:
        raise UsageError(f"--out {out}: {problem}")
    if not args.no_plot:
        from .plot import check_matplotlib

        check_matplotlib()
    sweep = measure("sweep", target, levels, items, args)
    files: dict[str, str | None] = {"csv": None, "png": None}
    unwritten: RunFailed | None = None
    if sweep.rows and sweep.failure is None:
        try:
            write_csv(sweep.rows, out / "sweep.csv")
            files["csv"] = str(out / "sweep.csv")
            if not args.no_plot:
                from .plot import write_png

                write_png(sweep.rows, out / "sweep.png", f"gptgate sweep: {target.describe()}")
                files["png"] = str(out / "sweep.png")
        except RunFailed as error:  # the table still shows what was measured (and paid for)
            unwritten = error
    code = print_outcome(sweep, SWEEP_COLUMNS, as_json=args.json, files=files)
    if unwritten is not None:
        raise unwritten
    return code


COMMAND = Command(
    name="sweep",
    summary="measure the concurrency U-curve and keep it (sweep.csv, sweep.png)",
    description="Run the same job at each concurrency level, then with gptgate's adaptive "
    "limit, and write what each level delivered and cost.",
    add_arguments=add_arguments,
    run=run,
    examples=EXAMPLES,
)
