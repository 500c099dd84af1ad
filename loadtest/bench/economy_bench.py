"""Reasoning-economy benchmark: what self-consistency and early stopping cost, save and do to accuracy, on one engine.

thinktier's own TierEngine (what the Serve deployment wraps), no Ray, over one of two prompt sets
(economy_prompts.py): easy arithmetic after a few-shot system prompt (what production prompts look like: a shared
block, then the question), or the reasoner's chained-addition problems per difficulty class. Three measurements,
each against its baseline in the same run:

1. Prefill of N samples: prompt tokens the engine computed (prefix-cache lookups minus hits) for N samples sent
   together under one cache salt (thinktier's self-consistency), for one vLLM request with n=N, and for N separate
   requests that share nothing (a salt each); over the prompt's length, i.e. in units of one sample's prefill.
2. Voting and early consensus: the N samples of a self-consistency request, decoded to their end as N requests sent
   together under one cache salt, sample j with seed + j (what the vote itself sends: `sample_request`), so each
   sample's answer is known; the accuracy of a majority vote of the first n of them, n = 1..N, is counted from those
   answers (no further decodes). Against them, the self-consistency request with the same seed, whose samples are the
   same decodes, stopped once `consensus` agree, with its samples started together and again staged (`consensus`
   started, more only when needed): its tokens, its accuracy and the share of prompts whose voted answer is the full
   vote's (one of them, where the full vote is tied). Prompt i's samples have seeds of their own,
   (seed x 1000 + i) x N + j, so no two prompts' samples draw the same random numbers.
3. Certainty exit: thinking tokens and accuracy of one decode with and without probing: greedy on the arithmetic
   prompts, on the reasoner's at the samples' temperature with one seed for both (the probes are requests of their
   own, so the decode samples the same tokens until they stop it); with the share of prompts whose answer stays the
   same, and the saving on those.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from thinktier.deployments.tier.answers import extract_answer
from thinktier.deployments.tier.protocol import TierChunk, TierRequest, collect
from thinktier.loadtest.bench.economy_prompts import BenchPrompt, Task, bench_prompts, describe
from thinktier.loadtest.bench.economy_report import CertaintyRow, ConsensusRow, PrefillRow, aims, markdown, summarize
from thinktier.policies.schema import EarlyExit, Tier

if TYPE_CHECKING:
    from thinktier.deployments.tier.engine import TierEngine

PHASES = ("prefill", "consensus", "certainty")


@dataclass(frozen=True)
class EconomySettings:
    task: Task = "arithmetic"
    prompts: int = 30
    """Prompts in all (the reasoner's: a third of them per class)."""
    samples: int = 8
    consensus: int = 3
    temperature: float = 0.6
    thinking_tokens: int = 256
    answer_tokens: int = 64
    interval_tokens: int = 8
    agree: int = 2
    seed: int = 0
    phases: tuple[str, ...] = PHASES

    @property
    def certainty_temperature(self) -> float:
        """Greedy on the arithmetic prompts (as the demo model's results were measured); the samples' temperature on
        the reasoner's, which thinks as it samples."""
        return 0.0 if self.task == "arithmetic" else self.temperature


def _voted(whole: TierChunk) -> str | None:
    votes = whole.economy.votes if whole.economy is not None else None
    return next(iter(votes), None) if votes else extract_answer(whole.content)


class EconomyBench:
    """The three measurements on one TierEngine."""

    def __init__(self, engine: TierEngine, settings: EconomySettings) -> None:
        self.engine = engine
        self.settings = settings

    def _request(self, rid: str, prompt: BenchPrompt, **changes: Any) -> TierRequest:
        s = self.settings
        fields: dict[str, Any] = {
            "request_id": rid, "thinking_tokens": s.thinking_tokens, "answer_tokens": s.answer_tokens,
            "messages": prompt.messages, "temperature": s.temperature, "progress": False, "cache_salt": rid,
            # a few-shot block may pass the tier's limit for client prompts; the context still holds it
            "max_prompt_tokens": self.engine.tier.engine.max_model_len - s.thinking_tokens - s.answer_tokens - 1,
        }
        return TierRequest(**(fields | changes))

    def _seed(self, i: int) -> int:
        """Prompt i's seed: its samples take it + j, j < N, so the samples of two prompts never share a seed."""
        return (self.settings.seed * 1000 + i) * self.settings.samples

    def _computed(self) -> int:
        stats = self.engine.stats()
        return stats.prefix_cache_queries_total - stats.prefix_cache_hits_total

    async def _measure(self, work: Callable[[], Awaitable[None]]) -> int:
        before = self._computed()
        await work()
        await asyncio.sleep(0.05)  # the stat logger records the last step after its outputs are delivered
        return self._computed() - before

    async def prefill(self, i: int, prompt: BenchPrompt) -> PrefillRow:
        n = self.settings.samples
        ids = self.engine.render_prompt(self._request("render", prompt))
        row = PrefillRow(prompt_tokens=len(ids))
        tiny = {"thinking_tokens": 1, "answer_tokens": 1}

        async def shared() -> None:
            await collect(self.engine.generate(self._request(f"pf-shared-{i}", prompt, samples=n, consensus=n, **tiny)))

        async def separate() -> None:
            await asyncio.gather(*(collect(self.engine.generate(self._request(f"pf-sep-{i}-{j}", prompt, **tiny)))
                                   for j in range(n)))

        async def vllm_n() -> None:
            from vllm import SamplingParams

            params = SamplingParams(n=n, max_tokens=2, temperature=self.settings.temperature)
            async for _ in self.engine.engine.generate({"prompt_token_ids": ids, "cache_salt": f"pf-n-{i}"}, params,
                                                       f"pf-n-{i}"):
                pass

        for mode, work in (("shared", shared), ("vllm_n", vllm_n), ("separate", separate)):
            row.computed[mode] = await self._measure(work)
        return row

    async def consensus(self, i: int, prompt: BenchPrompt) -> ConsensusRow:
        s = self.settings
        seed = self._seed(i)
        salt = f"cs-full-{i}"
        samples = await asyncio.gather(*(
            collect(self.engine.generate(self._request(f"{salt}-s{j}", prompt, seed=seed + j, cache_salt=salt)))
            for j in range(s.samples)))
        async def vote(rid: str, staged: bool) -> tuple[TierChunk, float]:
            started = time.monotonic()
            whole = await collect(self.engine.generate(self._request(
                rid, prompt, samples=s.samples, consensus=s.consensus, staged=staged, seed=seed)))
            return whole, time.monotonic() - started

        early, early_s = await vote(f"cs-early-{i}", staged=False)
        staged, staged_s = await vote(f"cs-staged-{i}", staged=True)
        assert early.economy is not None and staged.economy is not None
        return ConsensusRow(
            difficulty=prompt.difficulty,
            answers=[extract_answer(sample.content) for sample in samples],
            correct=[prompt.check(sample.content) for sample in samples],
            tokens=[sample.reasoning_tokens + sample.answer_tokens for sample in samples],
            answer_early=_voted(early), correct_early=prompt.check(early.content),
            tokens_early=early.reasoning_tokens + early.answer_tokens, aborted=early.economy.samples_aborted,
            answer_staged=_voted(staged), correct_staged=prompt.check(staged.content),
            tokens_staged=staged.reasoning_tokens + staged.answer_tokens, started_staged=staged.economy.samples,
            seconds_early=early_s, seconds_staged=staged_s,
        )

    async def certainty(self, i: int, prompt: BenchPrompt) -> CertaintyRow:
        s = self.settings
        # the tier's probe, as the ingress sends it, at this run's interval and agreement
        probing = EarlyExit(**(self.engine.tier.early_exit.model_dump() | {"interval_tokens": s.interval_tokens,
                                                                          "agree": s.agree}))
        same = {"temperature": s.certainty_temperature, "seed": self._seed(i)}
        plain = await collect(self.engine.generate(self._request(f"ce-plain-{i}", prompt, **same)))
        exit_ = await collect(self.engine.generate(self._request(f"ce-exit-{i}", prompt, certainty_exit=probing, **same)))
        economy = exit_.economy
        return CertaintyRow(
            difficulty=prompt.difficulty,
            answer_plain=extract_answer(plain.content), answer_exit=extract_answer(exit_.content),
            correct_plain=prompt.check(plain.content), correct_exit=prompt.check(exit_.content),
            thinking_plain=plain.reasoning_tokens, thinking_exit=exit_.reasoning_tokens,
            probes=economy.probes if economy else 0, exited=bool(economy and economy.early_stop == "certainty"),
        )


async def _run(tier_name: str, tier: Tier, settings: EconomySettings, prompts: list[BenchPrompt],
               overrides: dict[str, Any]) -> dict[str, list[Any]]:
    from thinktier.deployments.tier.engine import TierEngine

    engine = TierEngine(tier_name, tier, overrides)
    bench = EconomyBench(engine, settings)
    rows: dict[str, list[Any]] = {"prefill": [], "consensus": [], "certainty": []}
    try:
        measures = {"prefill": bench.prefill, "consensus": bench.consensus, "certainty": bench.certainty}
        for phase in settings.phases:
            measure = measures[phase]
            for i, prompt in enumerate(tqdm(prompts, desc=phase, unit="prompt")):
                rows[phase].append(await measure(i, prompt))
    finally:
        engine.shutdown()
    return rows


def run(policy_tier: tuple[str, Tier], settings: EconomySettings, out_dir: Path, command: str, device: str,
        overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the measurements; writes results.json and results.md into `out_dir`."""
    name, tier = policy_tier
    started = time.monotonic()
    prompts = bench_prompts(settings.task, settings.prompts, settings.seed)
    rows = asyncio.run(_run(name, tier, settings, prompts, overrides or {}))
    summary = summarize(rows["prefill"], rows["consensus"], rows["certainty"])
    aim_rows = aims(summary)
    report = {
        "command": command, "device": device, "model": tier.model, "settings": asdict(settings),
        "prompts": describe(settings.task, prompts), "certainty_temperature": settings.certainty_temperature,
        "wall_s": time.monotonic() - started, "summary": summary, "aims": [asdict(a) for a in aim_rows],
        "rows": {phase: [asdict(r) for r in phase_rows] for phase, phase_rows in rows.items()},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out_dir / "results.md").write_text(markdown(report, aim_rows), encoding="utf-8")
    return report
