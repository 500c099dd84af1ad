"""`thinktier loadtest compare`: one workload against several targets that the tool starts itself, one after the
other on the same machine, and a side-by-side report with each metric as a ratio to a baseline target.

Each target is started once and runs every load of the matrix back to back: the first seed at every rate, then each
repeated seed at the middle rate (an engine start costs minutes; a load run need not). The line-up is
`compare_targets.LINEUP`; the report is `compare_report`'s, rebuilt from the raw files it writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx

from thinktier.loadtest.client import RequestOptions
from thinktier.loadtest.compare_report import SEED_DIR, TARGET_FILE, CompareReport, summarize
from thinktier.loadtest.compare_targets import CompareTarget
from thinktier.loadtest.measure import LoadSpec, measure, work_items
from thinktier.loadtest.metrics_scraper import RAY_LLM_METRICS
from thinktier.loadtest.ray_llm_target import RayLLMApp, settings_from_tier
from thinktier.loadtest.runner import RunSettings, Target
from thinktier.loadtest.workload import Prompt, PromptPool
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import SLO, DifficultyClass


@contextmanager
def started(
    target: CompareTarget, port: int, metrics_port: int, options: RequestOptions, prompts: Sequence[Prompt] = ()
) -> Iterator[Target]:
    """Start `target`, yield where to send the load (and, for a peer given per-class budgets, each of `prompts`'
    options), and stop it afterwards."""
    if target.kind == "thinktier":
        from thinktier.cluster.local import LocalCluster  # lazily: starting thinktier pulls in Ray Serve and vLLM

        with LocalCluster(target.policy_path, port) as cluster:
            yield Target(cluster.url, options=options)
        return
    policy = load_policy(target.policy_path)
    tier = policy.tiers[target.tier or policy.routing.reasoning_tier]
    settings = settings_from_tier(tier, cpu_threads=target.cpu_threads)
    # Without thinking budgets a reasoning model may think until max_model_len; stop it where thinktier's largest budget would.
    max_tokens = options.max_tokens or max(b.thinking_tokens + b.answer_tokens for b in tier.budgets.values())
    peer = replace(options, model=settings.model_id, max_tokens=max_tokens)
    per_prompt = {}
    if target.budgets_policy is not None:
        from thinktier.loadtest.peer_budgets import per_class_options  # lazily: it loads the classifier

        per_prompt = per_class_options(load_policy(target.budgets_policy), prompts, peer)
    with RayLLMApp(settings, port, metrics_port) as app:
        yield Target(app.url, options=peer, metrics_url=app.metrics_url, metric_names=RAY_LLM_METRICS,
                     per_prompt=per_prompt)


def warm_up(endpoint: Target, timeout_s: float = 300.0) -> None:
    """One short request, answered in full, before the load: a target that cannot serve it fails the compare here,
    not during the measurement (and the first request's one-off costs stay out of the figures)."""
    body = replace(endpoint.options, max_tokens=16, thinking_token_budget=None).body("Say hello.")
    response = httpx.post(endpoint.completions_url, json=body, headers=endpoint.options.headers(), timeout=timeout_s)
    if response.status_code != 200 or "data: [DONE]" not in response.text:
        raise RuntimeError(f"warm-up request to {endpoint.url} failed: HTTP {response.status_code}: {response.text[:300]}")


def load_specs(spec: LoadSpec, repeat_seeds: Sequence[int]) -> list[LoadSpec]:
    """`spec` (its seed at every rate), then each of `repeat_seeds` at the middle of its rates (the median rate; the
    higher middle one of an even count)."""
    middle = sorted(spec.rates)[len(spec.rates) // 2]
    return [spec, *(replace(spec, rates=(middle,), seed=seed) for seed in repeat_seeds if seed != spec.seed)]


def compare(
    targets: Sequence[CompareTarget],
    specs: Sequence[LoadSpec],
    pool: PromptPool,
    slos: dict[DifficultyClass, SLO],
    out_dir: Path,
    baseline: str,
    options: RequestOptions,
    port: int = 8000,
    metrics_port: int = 8090,
    settings: RunSettings | None = None,
) -> CompareReport | None:
    """Start each target in turn, run every spec against it into OUT/TARGET/seed-S/, stop it; then, once the baseline
    has run (in this call or an earlier one into the same folder), write compare.json/.md from every target folder
    there. None while the baseline has not run."""
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError(f"target names must be unique; got {names}")
    for target in targets:
        described = out_dir / target.name / TARGET_FILE
        described.parent.mkdir(parents=True, exist_ok=True)
        policy = os.path.relpath(target.policy_path, out_dir)  # the folder may move (committed results)
        described.write_text(json.dumps({"kind": target.kind, "policy": policy, "what": target.what}, indent=2) + "\n")
    prompts = [item.prompt for spec in specs for item in work_items(spec, pool)]
    for target in targets:
        with started(target, port, metrics_port, options, prompts) as endpoint:
            warm_up(endpoint)
            for spec in specs:
                measure(endpoint, spec, pool, slos, out_dir / target.name / f"{SEED_DIR}{spec.seed}", settings)
    if not (out_dir / baseline).is_dir():
        return None
    return summarize(out_dir, baseline)
