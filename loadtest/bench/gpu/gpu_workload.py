"""The bench's workloads (CPU side, pure): open-loop requests of the reasoning tier, each with the budgets and
priority the router's own code gives it, written to and read from JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thinktier.deployments.request.decision import RoutingRequest
from thinktier.deployments.request.routing import EFFORT_CLASS, budget_decision
from thinktier.loadtest.workload import Mix, PromptPool, open_loop
from thinktier.policies.schema import DifficultyClass, Effort, Policy

CLASS_EFFORT: dict[DifficultyClass, Effort] = {klass: effort for effort, klass in EFFORT_CLASS.items()}
CLASSES: tuple[DifficultyClass, ...] = ("easy", "medium", "hard")
DEFAULT_MIX = "easy=0.6,medium=0.25,hard=0.15"


@dataclass(frozen=True)
class BenchRequest:
    """One request of a workload, with what the router decided for it."""

    index: int
    send_at_s: float
    difficulty: DifficultyClass
    prompt_id: str
    text: str
    thinking_tokens: int
    answer_tokens: int
    priority: int


@dataclass(frozen=True)
class Workload:
    name: str
    rate: float
    shape: float
    duration_s: float
    seed: int
    mix: str
    requests: tuple[BenchRequest, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def header(self) -> dict[str, Any]:
        """What a report records of the workload: everything but its requests, which it counts."""
        return {k: v for k, v in self.to_json().items() if k != "requests"} | {"requests": len(self.requests)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workload:
        requests = tuple(BenchRequest(**r) for r in data["requests"])
        return cls(**{**data, "requests": requests})


def build_workload(
    policy: Policy, pool: PromptPool, name: str, mix: Mix, rate: float, shape: float, duration_s: float, seed: int
) -> Workload:
    """Open-loop requests of the reasoning tier: classes by the mix, budgets and priority by the router's code."""
    if mix.shares.get("chat", 0) > 0:
        raise ValueError("the GPU bench drives the reasoning tier only: drop chat from --mix")
    tier = policy.routing.reasoning_tier
    requests = []
    for item in open_loop(pool, mix, rate, shape, duration_s, seed):
        klass: DifficultyClass = item.prompt.request_class  # type: ignore[assignment]
        decision = budget_decision(
            policy,
            RoutingRequest(prompt=item.prompt.text, reasoning_effort=CLASS_EFFORT[klass]),
            tier,
            CLASS_EFFORT[klass],
            "gpu_bench",
            None,
        )
        requests.append(
            BenchRequest(
                index=item.index,
                send_at_s=round(item.send_at_s, 4),
                difficulty=decision.difficulty,
                prompt_id=item.prompt.id,
                text=item.prompt.text,
                thinking_tokens=decision.thinking_tokens,
                answer_tokens=decision.answer_tokens,
                priority=decision.priority,
            )
        )
    return Workload(name, rate, shape, duration_s, seed, str(mix), tuple(requests))


def write_workload(
    policy: Policy,
    name: str,
    mix: Mix,
    rate: float,
    shape: float,
    duration_s: float,
    seed: int,
    languages: Sequence[str] | None,
    out: Path,
) -> Workload:
    """Build a workload from the builtin problem sets (in `languages`; all when None) and write it to `out` as JSON."""
    pool = PromptPool.builtin(languages)
    workload = build_workload(policy, pool, name, mix, rate, shape, duration_s, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(workload.to_json(), indent=1))
    return workload


def read_workloads(specs: Sequence[str]) -> dict[str, Workload]:
    """Workloads by name from 'NAME=PATH' items (PATH: a JSON file written by `write_workload`)."""
    workloads: dict[str, Workload] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            raise ValueError(f"--workload {spec!r} must look like NAME=PATH")
        workloads[name] = Workload.from_json(json.loads(Path(path).read_text()))
    return workloads
