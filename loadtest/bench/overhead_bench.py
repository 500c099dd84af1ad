"""What the ingress and router add over calling the vLLM engine directly, same machine, same run.

Baseline: the tier's TierEngine in this process (no Ray, no HTTP). Service: the same tier
behind thinktier (HTTP -> ingress -> router -> tier replica). Requests alternate between the
two, one at a time, with the same seeds, so both decode the same tokens under the same noise.
Reports median and p99 per request of end-to-end latency (non-streaming) and time to first
token (streaming), and their differences.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from tqdm import tqdm

from thinktier.cluster.local import LocalCluster
from thinktier.deployments.tier.engine import TierEngine, engine_env
from thinktier.deployments.tier.protocol import TierRequest
from thinktier.policies.loader import load_policy, write_policy_variant

ClassifierChoice = Literal["off", "deployment", "ingress"]
"""The difficulty classifier off, or on and scoring in its deployment or in the Ingress."""
PROMPTS = (
    "what is the sum of 17 and 25",
    "hi! how's it going?",
    "Can you suggest a name for my new bakery? It sells mostly sourdough and pastries.",
    "Prove that there are infinitely many primes.",
    "¿Cuál es la capital de Australia?",
    "My Python script raises KeyError: 'id' when it reads the JSON file. How do I fix it?",
    "Find all real x such that x^4 - 5x^2 + 4 = 0.",
    "请帮我把这句话翻译成英文：今天天气很好。",  # noqa: RUF001 (full-width punctuation, as Chinese is written)
)
"""Chat, sums, proofs and code in several languages, as a service sees them, asked in turn (`_prompt`) on both paths, so
that the classifier's cost is measured over prompts it finds easy and hard to place (one prompt repeated would measure
one of its paths only)."""


@dataclass(frozen=True)
class Summary:
    median_ms: float
    p99_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Summary:
        ordered = sorted(seconds)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return cls(statistics.median(ordered) * 1000, p99 * 1000)


@dataclass(frozen=True)
class OverheadResult:
    tier: str
    requests: int
    answer_tokens: int
    direct_e2e: Summary
    service_e2e: Summary
    direct_ttft: Summary
    service_ttft: Summary

    @property
    def added_e2e_median_ms(self) -> float:
        return self.service_e2e.median_ms - self.direct_e2e.median_ms

    @property
    def added_ttft_median_ms(self) -> float:
        return self.service_ttft.median_ms - self.direct_ttft.median_ms


def _prompt(i: int) -> str:
    """What request pair i asks."""
    return PROMPTS[i % len(PROMPTS)]


def _request(i: int, answer_tokens: int) -> TierRequest:
    return TierRequest(
        request_id=f"bench-{i}",
        thinking_tokens=0,
        answer_tokens=answer_tokens,
        temperature=0.0,
        seed=max(i, 0),
        messages=({"role": "user", "content": _prompt(i)},),
    )


async def _direct_once(engine: TierEngine, i: int, answer_tokens: int) -> tuple[float, float]:
    start = time.perf_counter()
    first = None
    async for chunk in engine.generate(_request(i, answer_tokens)):
        if first is None and chunk.content:
            first = time.perf_counter() - start
    elapsed = time.perf_counter() - start
    return elapsed, first if first is not None else elapsed


async def _service_once(client: httpx.AsyncClient, model: str, i: int, answer_tokens: int) -> tuple[float, float]:
    body = {"model": model, "messages": [{"role": "user", "content": _prompt(i)}], "max_tokens": answer_tokens,
            "temperature": 0.0, "seed": i}
    start = time.perf_counter()
    (await client.post("/v1/chat/completions", json=body)).raise_for_status()
    elapsed = time.perf_counter() - start
    start = time.perf_counter()
    first = None
    async with client.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as response:
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: {") and '"content": "' in line and '"content": ""' not in line:
                first = time.perf_counter() - start
    return elapsed, first if first is not None else elapsed


async def _interleaved(engine: TierEngine, url: str, model: str, n: int, answer_tokens: int) -> dict[str, list[float]]:
    """Direct and service requests alternate, one at a time, so machine noise hits both sides alike.

    One event loop throughout: the engine's output handler lives on the loop that first used it."""
    samples: dict[str, list[float]] = {"direct_e2e": [], "direct_ttft": [], "service_e2e": [], "service_ttft": []}
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for i in tqdm(range(-3, n), desc="direct / through thinktier, alternating", unit="pair"):
            seed = max(i, 0)
            direct = await _direct_once(engine, seed, answer_tokens)
            service = await _service_once(client, model, seed, answer_tokens)
            if i >= 0:  # the first three pairs warm both paths
                samples["direct_e2e"].append(direct[0])
                samples["direct_ttft"].append(direct[1])
                samples["service_e2e"].append(service[0])
                samples["service_ttft"].append(service[1])
    return samples


def served_variant(
    policy_path: str, classifier: ClassifierChoice, http_proxy: str | None, artifact: str | None = None
) -> str:
    """A copy of the policy with the difficulty classifier off, or on and scoring where `classifier` says
    (`routing.classifier.placement`) with `artifact` when given, and the front door's `server.http_proxy` when given."""

    def edit(data: dict[str, Any]) -> None:
        config = data.setdefault("routing", {}).setdefault("classifier", {})
        config["enabled"] = classifier != "off"
        if classifier != "off":
            config["placement"] = classifier
        if artifact is not None:
            config["artifact"] = artifact
        if http_proxy is not None:
            data.setdefault("server", {})["http_proxy"] = http_proxy

    dest = Path(tempfile.mkdtemp(prefix="thinktier-overhead-")) / "policy.yaml"
    return str(write_policy_variant(policy_path, edit, dest))


def run(
    policy_path: str, tier: str, n: int, answer_tokens: int, out_dir: Path, classifier: ClassifierChoice = "off",
    http_proxy: str | None = None, artifact: str | None = None,
) -> OverheadResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    served_policy = served_variant(policy_path, classifier, http_proxy, artifact)
    policy = load_policy(served_policy)
    with LocalCluster(served_policy, port=18765, progress=lambda line: print(f"[cluster] {line}", flush=True)) as cluster:
        os.environ.update(engine_env(policy.tiers[tier]))  # the same engine settings as the tier's replica
        engine = TierEngine(tier, policy.tiers[tier])
        try:
            samples = asyncio.run(_interleaved(engine, cluster.url, policy.served_name(tier), n, answer_tokens))
        finally:
            engine.shutdown()
    result = OverheadResult(
        tier=tier, requests=n, answer_tokens=answer_tokens,
        **{name: Summary.of(values) for name, values in samples.items()},
    )
    write(result, policy_path, out_dir, classifier, policy.server.http_proxy, artifact)
    return result


def write(
    result: OverheadResult, policy_path: str, out_dir: Path, classifier: ClassifierChoice, http_proxy: str,
    artifact: str | None = None,
) -> None:
    chosen = "" if artifact is None else f" --classifier-artifact {artifact}"
    flag = f" --classifier {classifier}{chosen} --http-proxy {http_proxy} --out {out_dir}"
    data = asdict(result) | {
        "added_e2e_median_ms": result.added_e2e_median_ms,
        "added_ttft_median_ms": result.added_ttft_median_ms,
        "policy": policy_path,
        "classifier": classifier,
        "classifier_artifact": artifact,
        "http_proxy": http_proxy,
        "command": f"thinktier bench overhead --policy {policy_path} --tier {result.tier} --requests {result.requests}{flag}",
    }
    (out_dir / "overhead.json").write_text(json.dumps(data, indent=2) + "\n")
    rows = [
        ("end-to-end (non-streaming)", result.direct_e2e, result.service_e2e),
        ("time to first answer token (streaming)", result.direct_ttft, result.service_ttft),
    ]
    lines = [
        "# Serving overhead: thinktier (HTTP, ingress, router, tier replica) vs the engine called directly",
        "",
        f"`{data['command']}`: {result.requests} alternating request pairs, {result.answer_tokens} answer tokens, same seeds, "
        f"the same {len(PROMPTS)} prompts in turn (loadtest/bench/overhead_bench.py PROMPTS).",
        "",
        "| latency per request | direct median | direct p99 | thinktier median | thinktier p99 | added median | added p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, direct, service in rows:
        added_median, added_p99 = service.median_ms - direct.median_ms, service.p99_ms - direct.p99_ms
        lines.append(
            f"| {name} | {direct.median_ms:.1f} ms | {direct.p99_ms:.1f} ms | {service.median_ms:.1f} ms | "
            f"{service.p99_ms:.1f} ms | {added_median:+.1f} ms | {added_p99:+.1f} ms |"
        )
    lines.append("")
    lines.append(f"The difficulty classifier scored in the {classifier} (routing.classifier.placement), included above."
                 if classifier != "off" else
                 "The difficulty classifier was off: these are the ingress and router alone; `thinktier classifier bench` "
                 "measures the classifier.")
    (out_dir / "overhead.md").write_text("\n".join(lines) + "\n")
