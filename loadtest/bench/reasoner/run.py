"""`thinktier bench reasoner`: starts one tier's engine in this process, runs the behaviour phases, writes the report."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from thinktier.loadtest.bench.reasoner.behaviours import BehaviourBench, BehaviourSettings, Row
from thinktier.loadtest.bench.reasoner.report import aims, budget_plot, markdown, summarize
from thinktier.policies.schema import Tier
from thinktier.training.reasoner.sizes import ReasonerSize
from thinktier.training.reasoner.tasks import problems


async def _measure(tier_name: str, tier: Tier, size: ReasonerSize, settings: BehaviourSettings) -> list[Row]:
    from thinktier.deployments.tier.engine import TierEngine

    engine = TierEngine(tier_name, tier)
    bench = BehaviourBench(engine, settings)
    seed = settings.seed
    rows: list[Row] = []
    try:
        if "full" in settings.phases:
            rows += await bench.full(problems(size.difficulty, settings.per_class, seed))
        if "off" in settings.phases:
            rows += await bench.off(problems(size.difficulty, settings.per_class, seed + 1))
        if "budget" in settings.phases:
            rows += await bench.budget(problems(size.difficulty, settings.budget_per_class, seed + 2))
        if "vote" in settings.phases:
            rows += await bench.vote(problems(size.difficulty, settings.vote_per_class, seed + 3))
    finally:
        engine.shutdown()
    return rows


def hard_thinking_floor(size: ReasonerSize) -> int:
    """The issue's floor on hard problems' median thinking: 1,000 tokens on the small size, 4,000 on the large."""
    return 1000 if size.name == "small" else 4000


def run(policy_tier: tuple[str, Tier], size: ReasonerSize, settings: BehaviourSettings, out_dir: Path, command: str,
        device: str) -> dict[str, Any]:
    """Runs the phases; writes results.json, README.md and budget_accuracy.png into `out_dir`."""
    name, tier = policy_tier
    started = time.monotonic()
    rows = asyncio.run(_measure(name, tier, size, settings))
    summary = summarize(rows)
    aim_rows = aims(summary, hard_thinking_floor(size))
    report = {
        "command": command, "device": device, "model": tier.model, "size": size.name,
        "difficulty": asdict(size.difficulty), "settings": asdict(settings), "wall_s": time.monotonic() - started,
        "summary": summary, "aims": [asdict(a) for a in aim_rows], "rows": [asdict(r) for r in rows],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    budget_plot(summary, out_dir / "budget_accuracy.png", f"{tier.model}: accuracy by thinking budget")
    (out_dir / "README.md").write_text(markdown(report, aim_rows), encoding="utf-8")
    return report
