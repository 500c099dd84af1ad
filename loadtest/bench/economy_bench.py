"""Reasoning-economy benchmark: what self-consistency and early stopping cost and save, on one tier's engine.

thinktier's own TierEngine (what the Serve deployment wraps), no Ray, over generated easy arithmetic prompts with a
few-shot system prompt (what production prompts look like: a shared block, then the question). Three measurements,
each against its baseline in the same run:

1. Prefill of N samples: prompt tokens the engine computed (prefix-cache lookups minus hits) for N samples sent
   together under one cache salt (thinktier's self-consistency), for one vLLM request with n=N, and for N separate
   requests that share nothing (a salt each); over the prompt's length, i.e. in units of one sample's prefill.
2. Early consensus: all tokens of N samples that run to their end, against the same seeded samples stopped once
   `consensus` agree; with the share of prompts whose voted answer stays the same.
3. Certainty exit: thinking tokens of one greedy decode with and without probing; with the share of prompts whose
   answer stays the same, and the saving on those.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from thinktier.deployments.tier.answers import extract_answer, same_answer
from thinktier.deployments.tier.protocol import TierChunk, TierRequest, collect
from thinktier.policies.schema import EarlyExit, Tier

if TYPE_CHECKING:
    from thinktier.deployments.tier.engine import TierEngine

FEW_SHOT = "\n\n".join(
    ["You are a careful math tutor. Think step by step, then give the final answer in \\boxed{}."]
    + [f"Example {i}\nQuestion: {q}\nThinking: {t}\nAnswer: \\boxed{{{a}}}" for i, (q, t, a) in enumerate((
        ('What is 14 + 5?', '14 plus 5 is 19.', '19'),
        ('What is 9 * 6?', '9 times 6 is 54.', '54'),
        ('Sara has 12 pens and gives away 4. How many pens does she have left?', '12 minus 4 is 8.', '8'),
        ('What is 30 - 17?', '30 minus 17 is 13.', '13'),
        ('What is 7 * 8?', '7 times 8 is 56.', '56'),
        ('What is 45 + 38?', '45 plus 38: 45 plus 30 is 75, plus 8 is 83.', '83'),
        ('A box holds 6 eggs. How many eggs are in 4 boxes?', '4 boxes of 6 eggs is 4 times 6, which is 24.', '24'),
        ('What is 100 - 64?', '100 minus 64 is 36.', '36'),
        ('Mia reads 15 pages on Monday and 22 pages on Tuesday. How many pages did she read?', '15 plus 22 is 37.', '37'),
        ('What is 12 * 11?', '12 times 11 is 132.', '132'),
    ), start=1)]
)
"""A shared few-shot block, as production prompts have one (and SmolLM2 answers more often in \\boxed{} after it)."""


@dataclass(frozen=True)
class ArithmeticPrompt:
    question: str
    answer: int


def arithmetic_prompts(count: int, seed: int) -> list[ArithmeticPrompt]:
    """`count` easy one-step problems (sums, differences, products, a word problem), the same for a seed."""
    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        kind = i % 4
        if kind == 0:
            prompts.append(ArithmeticPrompt(f"What is {a} + {b}?", a + b))
        elif kind == 1:
            prompts.append(ArithmeticPrompt(f"What is {a + b} - {b}?", a))
        elif kind == 2:
            x, y = rng.randint(2, 12), rng.randint(2, 12)
            prompts.append(ArithmeticPrompt(f"What is {x} * {y}?", x * y))
        else:
            prompts.append(ArithmeticPrompt(f"Ben has {a} marbles and finds {b} more. How many marbles does he have?", a + b))
    return prompts


def messages(prompt: ArithmeticPrompt) -> tuple[dict[str, str], ...]:
    return ({"role": "system", "content": FEW_SHOT}, {"role": "user", "content": prompt.question})


PHASES = ("prefill", "consensus", "certainty")


@dataclass(frozen=True)
class EconomySettings:
    prompts: int = 30
    samples: int = 8
    consensus: int = 3
    temperature: float = 0.6
    thinking_tokens: int = 256
    answer_tokens: int = 64
    interval_tokens: int = 8
    agree: int = 2
    seed: int = 0
    phases: tuple[str, ...] = PHASES


@dataclass
class PrefillRow:
    prompt_tokens: int
    computed: dict[str, int] = field(default_factory=dict)
    """Mode -> prompt tokens computed for N samples."""


@dataclass
class ConsensusRow:
    answer_full: str | None
    answer_early: str | None
    tokens_full: int
    tokens_early: int
    aborted: int
    correct_full: bool
    correct_early: bool


@dataclass
class CertaintyRow:
    answer_plain: str | None
    answer_exit: str | None
    thinking_plain: int
    thinking_exit: int
    probes: int
    exited: bool


def _voted(whole: TierChunk) -> str | None:
    votes = whole.economy.votes if whole.economy is not None else None
    return next(iter(votes), None) if votes else extract_answer(whole.content)


def _correct(answer: str | None, truth: int) -> bool:
    return answer is not None and same_answer(answer, str(truth))


class EconomyBench:
    """The three measurements on one TierEngine."""

    def __init__(self, engine: TierEngine, settings: EconomySettings) -> None:
        self.engine = engine
        self.settings = settings

    def _request(self, rid: str, prompt: ArithmeticPrompt, **changes: Any) -> TierRequest:
        s = self.settings
        fields: dict[str, Any] = {
            "request_id": rid, "thinking_tokens": s.thinking_tokens, "answer_tokens": s.answer_tokens,
            "messages": messages(prompt), "temperature": s.temperature, "progress": False, "cache_salt": rid,
            # the few-shot block may pass the tier's limit for client prompts; the context still holds it
            "max_prompt_tokens": self.engine.tier.engine.max_model_len - s.thinking_tokens - s.answer_tokens - 1,
        }
        return TierRequest(**(fields | changes))

    def _computed(self) -> int:
        stats = self.engine.stats()
        return stats.prefix_cache_queries_total - stats.prefix_cache_hits_total

    async def _measure(self, work: Callable[[], Awaitable[None]]) -> int:
        before = self._computed()
        await work()
        await asyncio.sleep(0.05)  # the stat logger records the last step after its outputs are delivered
        return self._computed() - before

    async def prefill(self, i: int, prompt: ArithmeticPrompt) -> PrefillRow:
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

    async def consensus(self, i: int, prompt: ArithmeticPrompt) -> ConsensusRow:
        s = self.settings
        seed = s.seed * 1000 + i
        full = await collect(self.engine.generate(
            self._request(f"cs-full-{i}", prompt, samples=s.samples, consensus=s.samples, seed=seed)))
        early = await collect(self.engine.generate(
            self._request(f"cs-early-{i}", prompt, samples=s.samples, consensus=s.consensus, seed=seed)))
        a_full, a_early = _voted(full), _voted(early)
        assert early.economy is not None
        return ConsensusRow(
            answer_full=a_full, answer_early=a_early,
            tokens_full=full.reasoning_tokens + full.answer_tokens, tokens_early=early.reasoning_tokens + early.answer_tokens,
            aborted=early.economy.samples_aborted,
            correct_full=_correct(a_full, prompt.answer), correct_early=_correct(a_early, prompt.answer),
        )

    async def certainty(self, i: int, prompt: ArithmeticPrompt) -> CertaintyRow:
        s = self.settings
        probing = EarlyExit(interval_tokens=s.interval_tokens, agree=s.agree)
        plain = await collect(self.engine.generate(self._request(f"ce-plain-{i}", prompt, temperature=0.0)))
        exit_ = await collect(self.engine.generate(
            self._request(f"ce-exit-{i}", prompt, temperature=0.0, certainty_exit=probing)))
        economy = exit_.economy
        return CertaintyRow(
            answer_plain=extract_answer(plain.content), answer_exit=extract_answer(exit_.content),
            thinking_plain=plain.reasoning_tokens, thinking_exit=exit_.reasoning_tokens,
            probes=economy.probes if economy else 0, exited=bool(economy and economy.early_stop == "certainty"),
        )


def _agree(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and same_answer(a, b)


def summarize(prefill: list[PrefillRow], consensus: list[ConsensusRow], certainty: list[CertaintyRow]) -> dict[str, Any]:
    """Ratios and medians over the prompts (this machine is noisy; counts of tokens are not)."""
    out: dict[str, Any] = {}
    if prefill:
        out["prefill_x_one_sample_median"] = {
            mode: statistics.median(r.computed[mode] / r.prompt_tokens for r in prefill) for mode in prefill[0].computed
        }
        out["prompt_tokens_median"] = statistics.median(r.prompt_tokens for r in prefill)
    if consensus:
        full = sum(r.tokens_full for r in consensus)
        early = sum(r.tokens_early for r in consensus)
        out["consensus"] = {
            "tokens_full": full, "tokens_early": early, "tokens_saved_share": 1 - early / full,
            "per_prompt_saved_share_median": statistics.median(1 - r.tokens_early / r.tokens_full for r in consensus),
            "same_answer_share": sum(_agree(r.answer_full, r.answer_early) for r in consensus) / len(consensus),
            "samples_aborted_mean": statistics.mean(r.aborted for r in consensus),
            "accuracy_full": sum(r.correct_full for r in consensus) / len(consensus),
            "accuracy_early": sum(r.correct_early for r in consensus) / len(consensus),
        }
    if certainty:
        same = [r for r in certainty if _agree(r.answer_plain, r.answer_exit)]
        plain_same, exit_same = sum(r.thinking_plain for r in same), sum(r.thinking_exit for r in same)
        out["certainty"] = {
            "same_answer_share": len(same) / len(certainty),
            "exited_share": sum(r.exited for r in certainty) / len(certainty),
            "thinking_plain": sum(r.thinking_plain for r in certainty),
            "thinking_exit": sum(r.thinking_exit for r in certainty),
            "thinking_saved_share_where_same": 1 - exit_same / plain_same if plain_same else 0.0,
            "probes_mean": statistics.mean(r.probes for r in certainty),
        }
    return out


def markdown(report: dict[str, Any]) -> str:
    """The results table the README cites."""
    s, summary = report["settings"], report["summary"]
    lines = [f"# Reasoning economy on `{report['model']}` ({report['device']})", "",
             f"Command: `{report['command']}`  ", f"{s['prompts']} easy arithmetic prompts with a few-shot system "
             f"prompt (median {summary['prompt_tokens_median']:.0f} prompt tokens); wall time {report['wall_s']:.0f} s.", ""]
    px = summary["prefill_x_one_sample_median"]
    lines += ["## Prefill of N = {n} samples (prompt tokens computed, in units of one sample's prefill)".format(n=s["samples"]),
              "", "| mode | median x one sample | aim |", "|---|---|---|",
              f"| thinktier samples (sent together, one cache salt) | {px['shared']:.2f}x | under 1.5x |",
              f"| one vLLM request with n={s['samples']} | {px['vllm_n']:.2f}x | - |",
              f"| {s['samples']} separate requests (nothing shared) | {px['separate']:.2f}x | - |", ""]
    if "consensus" in summary:
        lines += _consensus_lines(s, summary["consensus"])
    if "certainty" in summary:
        lines += _certainty_lines(s, summary["certainty"])
    return "\n".join(lines)


def _consensus_lines(s: dict[str, Any], c: dict[str, Any]) -> list[str]:
    return [f"## Early consensus: N = {s['samples']}, stop at {s['consensus']} agreeing (temperature {s['temperature']})",
              "", "| | all samples to the end | early consensus |", "|---|---|---|",
              f"| tokens (thinking + answer, all samples) | {c['tokens_full']:,} | {c['tokens_early']:,} "
              f"(**{100 * c['tokens_saved_share']:.0f}% fewer**; median per prompt "
              f"{100 * c['per_prompt_saved_share_median']:.0f}%) |",
              f"| voted answer the same | - | **{100 * c['same_answer_share']:.0f}%** of prompts |",
              f"| voted answer correct | {100 * c['accuracy_full']:.0f}% | {100 * c['accuracy_early']:.0f}% |",
              f"| samples aborted per prompt (mean) | 0 | {c['samples_aborted_mean']:.1f} |",
              "", "Aim: at least 40% fewer tokens with the same answer on at least 90% of prompts.", ""]


def _certainty_lines(s: dict[str, Any], ce: dict[str, Any]) -> list[str]:
    return [f"## Certainty exit: probe every {s['interval_tokens']} thinking tokens, stop at {s['agree']} agreeing "
              "(greedy)", "", "| | no exit | certainty exit |", "|---|---|---|",
              f"| thinking tokens, all prompts | {ce['thinking_plain']:,} | {ce['thinking_exit']:,} |",
              f"| thinking saved where the answer is unchanged | - | **{100 * ce['thinking_saved_share_where_same']:.0f}%** |",
              f"| answer unchanged | - | {100 * ce['same_answer_share']:.0f}% of prompts |",
              f"| decodes ended by the probes | - | {100 * ce['exited_share']:.0f}% (mean {ce['probes_mean']:.1f} probes) |",
              "", "Aim: at least 25% fewer thinking tokens on the prompts whose answer does not change.", ""]


async def _run(tier_name: str, tier: Tier, settings: EconomySettings, overrides: dict[str, Any]) -> dict[str, Any]:
    from thinktier.deployments.tier.engine import TierEngine

    engine = TierEngine(tier_name, tier, overrides)
    bench = EconomyBench(engine, settings)
    prompts = arithmetic_prompts(settings.prompts, settings.seed)
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
    """Run the three measurements; writes results.json and results.md into `out_dir`."""
    name, tier = policy_tier
    started = time.monotonic()
    rows = asyncio.run(_run(name, tier, settings, overrides or {}))
    report = {
        "command": command, "device": device, "model": tier.model, "settings": asdict(settings),
        "wall_s": time.monotonic() - started,
        "summary": summarize(rows["prefill"], rows["consensus"], rows["certainty"]),
        "rows": {phase: [asdict(r) for r in phase_rows] for phase, phase_rows in rows.items()},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out_dir / "results.md").write_text(markdown(report), encoding="utf-8")
    return report
