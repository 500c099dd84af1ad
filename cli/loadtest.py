"""`thinktier loadtest`: measure thinktier, or any OpenAI-compatible endpoint, under realistic reasoning traffic."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from thinktier.deployments.classifier.difficulty_artifact import DEFAULT_ARTIFACT
from thinktier.loadtest.client import RequestOptions
from thinktier.loadtest.measure import LoadSpec
from thinktier.loadtest.metrics_scraper import RAY_LLM_METRICS, THINKTIER_METRICS
from thinktier.loadtest.report import RunReport
from thinktier.loadtest.runner import RunSettings, Target
from thinktier.loadtest.workload import Mix, PromptPool, classifier_held_out
from thinktier.policies.loader import DEFAULT_POLICY, PolicyError, load_policy
from thinktier.policies.schema import EFFORTS
from thinktier.training.reasoner.sizes import SIZES, SizeName

DEFAULT_MIX = "easy=0.5,medium=0.3,hard=0.1,chat=0.1"
THINKTIER_MODEL = "thinktier"
EXPORTERS = {"thinktier": THINKTIER_METRICS, "ray-serve-llm": RAY_LLM_METRICS}
"""Whose metric names the scrape reads."""
SINGLE_POOL_POLICY = Path(__file__).resolve().parent.parent / "policies" / "examples" / "single-pool.yaml"
PROBLEM_SETS = "problem-sets"
HELD_OUT = "held-out"
REASONER_PROMPTS: dict[str, SizeName] = {f"reasoner-{size}": size for size in SIZES}
"""--prompts choices of the reasoner's task family, by the size whose difficulty they take."""


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(r) for r in text.split(",") if r.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rate {text!r}: expected numbers separated by commas, e.g. 0.5,1,2") from None
    if not rates or any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"--rate {text!r}: every rate must be > 0 requests per second")
    return rates


def _mix(text: str) -> Mix:
    try:
        return Mix.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    w = parser.add_argument_group("workload (the same seed gives the same prompts at the same times)")
    w.add_argument(
        "--mix",
        type=_mix,
        default=Mix.parse(DEFAULT_MIX),
        metavar="CLASS=W,...",
        help=f"share of each request class: easy (GSM8K), medium (MATH500), hard (AIME, CNMO), chat "
        f"(no reasoning needed); weights are normalised (default {DEFAULT_MIX})",
    )
    w.add_argument(
        "--prompts",
        choices=[HELD_OUT, PROBLEM_SETS, *REASONER_PROMPTS],
        default=HELD_OUT,
        help=f"where the prompts come from: {HELD_OUT}, the packaged problem sets and chat prompts the default "
        f"classifier ({DEFAULT_ARTIFACT}) was not trained on, as its manifest lists them, so its scores are those of "
        f"new traffic (English alone under a short --max-prompt-chars leaves few hard problems, 7 at 400 characters: add "
        f"--languages all); {PROBLEM_SETS}, all of them (answers not checked either way); or the reasoner's task family at "
        "a size's difficulty (reasoner-small for builtin:reasoner-small): chained additions per class and chat turns, "
        "drawn from --seed, every answer checked, so the report adds accuracy and correct goodput "
        f"(default {HELD_OUT})",
    )
    w.add_argument(
        "--rate",
        type=_rates,
        default=(1.0,),
        metavar="R[,R...]",
        help="open loop: mean arrival rate, requests/s; several comma-separated rates make a sweep, one run each (default 1)",
    )
    w.add_argument(
        "--shape",
        type=_positive,
        default=1.0,
        help="open loop: Gamma shape of the inter-arrival times: 1 = Poisson, below 1 = burstier "
        "(CV = 1/sqrt(shape); 0.25 gives CV 2) (default 1)",
    )
    w.add_argument(
        "--duration",
        type=_positive,
        default=60.0,
        metavar="SECONDS",
        help="open loop: how long requests keep arriving, per rate; the run then waits for the last one (default 60)",
    )
    w.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="closed loop instead: send N requests at once and wait for the slowest before the next batch "
        "(exposes stragglers); --rate, --shape and --duration are then ignored",
    )
    w.add_argument("--batches", type=int, default=3, metavar="N", help="closed loop: number of batches (default 3)")
    w.add_argument("--seed", type=int, default=0, help="seed of arrivals and prompt draws (default 0)")
    w.add_argument(
        "--languages",
        default="en",
        metavar="CODE[,CODE...]",
        help="languages of the problem sets (ISO 639-1, e.g. en,fr,zh), or 'all' (default en); reasoner prompts take "
        "one of en, es, fr, or all three mixed",
    )
    w.add_argument(
        "--max-prompt-chars",
        type=int,
        default=None,
        metavar="N",
        help="leave out problem-set prompts longer than N characters (for servers with a small prompt limit; default: "
        "keep all); reasoner prompts are all short",
    )
    r = parser.add_argument_group("requests")
    r.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="max_tokens of every request; unset lets the server decide. vLLM-based servers count thinking and answer "
        "against it; thinktier caps only the answer with it (thinking has its own budget). compare gives Ray Serve "
        "LLM's requests their own: the budget --policy's classifier gives each (thinking + answer)",
    )
    r.add_argument(
        "--effort",
        choices=EFFORTS,
        default=None,
        help="send this reasoning_effort with every request (default: none; thinktier decides per prompt)",
    )
    r.add_argument("--max-thinking-tokens", type=int, default=None, help="send this max_thinking_tokens with every request")
    r.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature of every request (run: the server's default when unset; compare: thinktier's "
        "default, sent to every target, when unset)",
    )
    r.add_argument(
        "--api-key-env", default=None, metavar="VAR", help="environment variable holding the API key to send as a Bearer token"
    )
    r.add_argument(
        "--request-timeout",
        type=_positive,
        default=600.0,
        metavar="SECONDS",
        help="a request not complete after this long counts as an error (default 600)",
    )
    o = parser.add_argument_group("output")
    o.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder for report.json, report.md, requests.jsonl and the PNG plots (default loadtest/results/<command>-<time>)",
    )
    o.add_argument(
        "--scrape-interval",
        type=_positive,
        default=1.0,
        metavar="SECONDS",
        help="how often /metrics is scraped for KV occupancy and stragglers (default 1)",
    )
    o.add_argument("--no-progress", action="store_true", help="no progress bar")


def spec_of(args: argparse.Namespace) -> LoadSpec:
    return LoadSpec(
        mix=args.mix,
        rates=args.rate,
        shape=args.shape,
        duration_s=args.duration,
        batch_size=args.batch_size,
        batches=args.batches,
        seed=args.seed,
        prompts=args.prompts,
    )


def request_options(args: argparse.Namespace, model: str | None, thinking_token_budget: int | None = None) -> RequestOptions:
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise SystemExit(f"--api-key-env {args.api_key_env}: that environment variable is not set or empty")
    return RequestOptions(
        model=model,
        max_tokens=args.max_tokens,
        reasoning_effort=args.effort,
        max_thinking_tokens=args.max_thinking_tokens,
        thinking_token_budget=thinking_token_budget,
        temperature=args.temperature,
        api_key=api_key,
    )


def pool_of(args: argparse.Namespace) -> PromptPool:
    languages = None if args.languages == "all" else [c.strip() for c in args.languages.split(",") if c.strip()]
    if args.prompts in (HELD_OUT, PROBLEM_SETS):
        only = classifier_held_out() if args.prompts == HELD_OUT else None
        return PromptPool.builtin(languages, args.max_prompt_chars, only)
    try:
        return PromptPool.reasoner(REASONER_PROMPTS[args.prompts], args.seed, languages)
    except ValueError as exc:
        raise SystemExit(f"--prompts {args.prompts} --languages {args.languages}: {exc}") from None


def run_settings(args: argparse.Namespace) -> RunSettings:
    return RunSettings(
        request_timeout_s=args.request_timeout, scrape_interval_s=args.scrape_interval, progress=not args.no_progress
    )


def out_dir(args: argparse.Namespace, command: str) -> Path:
    if args.out is not None:
        return args.out.resolve()
    from datetime import datetime

    return (Path("loadtest/results") / f"{command}-{datetime.now():%Y%m%d-%H%M%S}").resolve()


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _correctness(run: RunReport) -> str:
    """Correct goodput and accuracy, for a run whose answers were checked; nothing otherwise."""
    if run.correct_goodput_rps is None:
        return ""
    accuracy = "-" if run.overall.accuracy is None else f"{run.overall.accuracy:.1%}"
    return f", correct goodput {run.correct_goodput_rps:.2f} req/s, accuracy {accuracy}"


def _run(args: argparse.Namespace) -> int:
    from thinktier.loadtest.measure import measure  # lazily: matplotlib is slow to import

    try:
        slos = load_policy(args.policy).slos
    except PolicyError as exc:
        print(exc, file=sys.stderr)
        return 1
    target = Target(
        args.url,
        options=request_options(args, args.model, args.thinking_token_budget),
        metrics_url=args.metrics_url,
        metric_names=EXPORTERS[args.exporter],
    )
    out = out_dir(args, "run")
    report, paths = measure(target, spec_of(args), pool_of(args), slos, out, run_settings(args))
    for run in report.runs:
        o = run.overall
        print(
            f"{run.label}: {o.requests} requests, {o.ok} ok, {o.shed} shed, {o.errors} errors; "
            f"goodput {run.goodput_rps:.2f} req/s{_correctness(run)}, TPS {run.tps:.1f}, TTFVT p99 {_seconds(o.ttfvt_s.p99)}"
        )
    print(f"wrote {len(paths)} files to {out} (start with {out / 'report.md'})")
    return 0


def _peer(args: argparse.Namespace) -> int:
    import signal
    import threading

    from thinktier.loadtest.ray_llm_target import PEER_READY_LINE, RayLLMApp, peer_options, settings_from_tier  # lazily

    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        print(exc, file=sys.stderr)
        return 1
    tier = args.tier or policy.routing.reasoning_tier
    if tier not in policy.tiers:
        print(f"--tier {tier!r}: no such tier in {args.policy}; tiers are {sorted(policy.tiers)}", file=sys.stderr)
        return 2
    settings = settings_from_tier(policy.tiers[tier])
    options = peer_options(policy, tier, settings.model_id)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with RayLLMApp(settings, args.port, args.metrics_port, args.ready_timeout) as app:
        print(
            f"{PEER_READY_LINE} {settings.model_id!r} ({tier} tier of {args.policy}, {settings.scaling}) at {app.url}/v1; "
            f"vLLM metrics at {app.metrics_url}. A load test at {policy.routing.default_effort} effort sends: "
            f"--model {options.model} --max-tokens {options.max_tokens}"
            + (f" --thinking-token-budget {options.thinking_token_budget}" if options.thinking_token_budget is not None else "")
            + f" --metrics-url {app.metrics_url} --exporter ray-serve-llm. Ctrl-C or SIGTERM stops it.",
            flush=True,
        )
        while not stop.wait(1.0):
            pass
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from thinktier.cli.loadtest_compare import add_compare  # it imports this module's helpers

    loadtest = subparsers.add_parser(
        "loadtest",
        help="measure thinktier or any OpenAI-compatible endpoint under reasoning traffic",
        description="Replay realistic reasoning traffic (prompts of graded difficulty plus chat, bursty Gamma arrivals or "
        "closed-loop batches) and report TTFVT, E2E, TPS, goodput under the policy's SLOs, accuracy and correct "
        "goodput (with --prompts reasoner-*), thinking tokens, shed and degraded requests, and KV occupancy and "
        "stragglers per tier.",
    )
    commands = loadtest.add_subparsers(title="loadtest commands", metavar="COMMAND", required=True)

    run = commands.add_parser(
        "run",
        help="load one running endpoint and write a report",
        description="Send a workload to a running OpenAI-compatible endpoint (streaming /v1/chat/completions), scrape its "
        "/metrics alongside, and write report.json, report.md, requests.jsonl and PNG plots.",
    )
    run.add_argument("--url", required=True, help="base URL of the endpoint, e.g. http://127.0.0.1:8000 (the API is under /v1)")
    run.add_argument(
        "--model",
        default=THINKTIER_MODEL,
        help=f"'model' of every request (default {THINKTIER_MODEL!r}: thinktier routes it by difficulty; a tier's served "
        "name pins that tier; give a peer endpoint's model name to measure it)",
    )
    run.add_argument(
        "--policy",
        default=str(DEFAULT_POLICY),
        help=f"policy file whose slos judge goodput (default {DEFAULT_POLICY.name}); chat requests are held to the easy SLO",
    )
    run.add_argument("--metrics-url", default=None, help="Prometheus page to scrape (default URL/metrics)")
    run.add_argument(
        "--exporter",
        choices=sorted(EXPORTERS),
        default="thinktier",
        help="whose metric names to read from --metrics-url: thinktier's, or vLLM's as Ray Serve LLM exports them "
        "(ray_vllm_*, on Ray's metrics port) (default thinktier)",
    )
    run.add_argument(
        "--thinking-token-budget",
        type=int,
        default=None,
        metavar="N",
        help="send vLLM's own per-request thinking cap (thinking_token_budget) with every request: for a vLLM-based "
        "peer such as Ray Serve LLM; thinktier sets budgets itself and rejects the field",
    )
    add_workload_args(run)
    run.set_defaults(func=_run)

    add_compare(commands)

    peer = commands.add_parser(
        "peer",
        help="serve Ray Serve LLM on a tier's model and engine settings until stopped (the peer to measure against)",
        description="Start Ray, Ray Serve and Ray Serve LLM's OpenAI app with the tier's vLLM engine settings, replica "
        "count and thinking prompt, plus Ray Serve LLM's prefix-aware request router; wait until the model is listed; "
        "print what a fair load test sends it; serve until Ctrl-C or SIGTERM. `thinktier bench fullstack --peer` runs it.",
    )
    peer.add_argument("--policy", required=True, help="policy file whose tier the peer copies")
    peer.add_argument("--tier", default=None, help="tier to copy (default: the routing's reasoning tier)")
    peer.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    peer.add_argument("--metrics-port", type=int, default=8090, help="Ray metrics export port (default 8090)")
    peer.add_argument("--ready-timeout", type=_positive, default=900.0, metavar="SECONDS",
                      help="give up when the model is not listed after this long (default 900)")
    peer.set_defaults(func=_peer)
