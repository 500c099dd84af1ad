"""The requests of a config's run: the driver's own warm-up and idle probe, and the `thinktier loadtest run` command
with the failures counted from the requests it saved."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx

from thinktier.loadtest.bench.fullstack.fullstack_record import Failures, IdleProbe, ProbeReply
from thinktier.loadtest.bench.fullstack.fullstack_settings import LoadArgs
from thinktier.loadtest.bench.fullstack.fullstack_targets import AUTO_MODEL, Config
from thinktier.loadtest.client import RequestOptions, RequestResult, send
from thinktier.loadtest.workload import Prompt, WorkItem
from thinktier.policies.schema import Policy

IDLE_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def _item(index: int, text: str) -> WorkItem:
    return WorkItem(index, Prompt(f"fullstack-{index}", text, "chat", "fullstack"))


async def _send_all(
    url: str, bodies: Sequence[tuple[RequestOptions, str]], sequential: bool, timeout_s: float
) -> list[RequestResult]:
    completions = f"{url}/v1/chat/completions"
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        t0 = time.perf_counter()
        calls = [send(client, completions, _item(i, text), options, t0) for i, (options, text) in enumerate(bodies)]
        if sequential:
            return [await call for call in calls]
        return list(await asyncio.gather(*calls))


def warm_up(url: str, config: Config, policy: Policy) -> dict[str, int]:
    """The config's warm-up requests at once. Returns the replies' 'status tier', counted."""
    results = asyncio.run(_send_all(url, config.warm_up_bodies(policy), sequential=False, timeout_s=60))
    return dict(Counter(f"{r.status} {r.decision.get('tier', '-')}" for r in results))


def _median(values: Iterable[float | int | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return statistics.median(present) if present else None


def idle_summary(model: str, results: Sequence[RequestResult]) -> IdleProbe:
    replies = [
        ProbeReply(status=r.status, error=r.error, tier=r.decision.get("tier"), ttft_s=r.ttft_s, ttfvt_s=r.ttfvt_s,
                   e2e_s=r.e2e_s, completion_tokens=r.completion_tokens)
        for r in results
    ]
    ok = [r for r in replies if r.status == 200 and r.error is None]
    return IdleProbe(
        model=model, replies=replies, ttft_median_s=_median(r.ttft_s for r in ok), e2e_median_s=_median(r.e2e_s for r in ok),
        tokens_median=_median(r.completion_tokens for r in ok),
    )


def idle_probe(url: str, config: Config, policy: Policy, requests: int = 3) -> IdleProbe:
    options = config.idle_options(policy)
    results = asyncio.run(_send_all(url, [(options, IDLE_PROMPT)] * requests, sequential=True, timeout_s=120))
    return idle_summary(options.model or AUTO_MODEL, results)


def loadtest_command(url: str, load: LoadArgs, out_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable, "-m", "thinktier", "loadtest", "run", "--url", url, "--policy", str(load.slo_policy),
        "--rate", str(load.rate), "--shape", str(load.shape), "--duration", str(load.duration_s), "--seed", str(load.seed),
        "--mix", load.mix, "--request-timeout", str(load.request_timeout_s), "--no-progress", "--out", str(out_dir), *extra,
    ]


def failures(rows: Sequence[dict[str, Any]]) -> Failures:
    """Counted from requests.jsonl rows, read back as the RequestResults they were, so `ok` and `shed` mean what
    they mean in the report."""
    results = [RequestResult.from_row(row) for row in rows]
    return Failures(
        requests=len(results),
        errors=sum(not r.ok and not r.shed for r in results),
        shed=sum(r.shed for r in results),
        no_response=sum(r.status is None for r in results),
        timeouts=sum("--request-timeout" in (r.error or "") for r in results),
    )
