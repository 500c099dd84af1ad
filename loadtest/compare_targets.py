"""The comparison matrix's line-up: six servers on the same resources and load, each isolating one mechanism.

1. `one-pool`: one tier, every request the same budget (the single-pool policy as given), degradation off.
2. `one-pool-budgets`: the single pool's tier and resources with the tiered policy's classifier, per-class budgets,
   scheduling and priorities, and no chat tier (prompts scored below `thresholds.reasoning` answer with thinking off):
   the value of budgets alone, against 1.
3. `tiered-no-degradation`: the tiered policy with degradation and lending off: the value of the split alone, against 2.
4. `tiered-lending`: the tiered policy's lending with degradation off: the value of tiers lending idle capacity,
   against 3 (only where the tiered policy has `lending` rules).
5. `tiered`: the tiered policy as it ships: what degradation adds and costs, against 4 (or 3 without lending).
6. `ray-serve-llm`: Ray Serve LLM on the single pool's tier, each request given the budget the tiered policy's
   classifier and budgets give it (vLLM's `thinking_token_budget` and `max_tokens`, scored before the load starts).

Degradation off: no budget cut, no chat fallback, and the saturation thresholds at their maxima, so that a request
waits in the engine's queue rather than being cut or moved; it is shed (429) only when every replica of its tier
reports a completely full KV cache (the schema has no setting that never sheds). Every policy a target serves is
written beside the results, so the report names the exact file.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from thinktier.policies.loader import dump_policy, parse_policy
from thinktier.policies.schema import Policy

TargetKind = Literal["thinktier", "ray-serve-llm"]
LINEUP = ("one-pool", "one-pool-budgets", "tiered-no-degradation", "tiered-lending", "tiered", "ray-serve-llm")
"""The six targets, in the order they run and are reported."""
DEGRADATION_OFF: dict[str, object] = {
    "shrink_budget_to": None,
    "fallback_to_chat": False,
    "saturated_kv_occupancy": 1.0,
    "saturated_waiting_requests": 1_000_000,
}


@dataclass(frozen=True)
class CompareTarget:
    """A server the compare starts: thinktier on a policy file, or Ray Serve LLM on a tier of a policy file."""

    name: str
    kind: TargetKind
    policy_path: str
    what: str
    """What the target isolates, for the report."""
    tier: str | None = None
    """Ray Serve LLM only: the tier whose model and engine settings it copies (the routing's reasoning tier when None)."""
    cpu_threads: str | None = None
    """Ray Serve LLM on CPU only: the cores its engine binds to."""
    budgets_policy: str | None = None
    """Ray Serve LLM only: the policy whose classifier and budgets set each request's budget; None: every request the
    largest thinking + answer budget of the copied tier as `max_tokens`, and no thinking budget."""


def without_degradation(policy: Policy) -> Policy:
    data = policy.model_dump(mode="json")
    data["degradation"].update(DEGRADATION_OFF)
    return parse_policy(json.dumps(data), "degradation off")


def without_lending(policy: Policy) -> Policy:
    return policy.model_copy(update={"lending": []})


def one_pool_with_budgets(tiered: Policy, pool: Policy) -> Policy:
    """`pool`'s reasoning tier (model, engine, resources, replicas) under `tiered`'s classifier, thresholds,
    priorities, SLOs, and its reasoning tier's budgets and scheduling policy; no chat tier; degradation off."""
    data = tiered.model_dump(mode="json")
    source = tiered.tiers[tiered.routing.reasoning_tier]
    name = pool.routing.reasoning_tier
    tier = pool.tiers[name].model_dump(mode="json")
    tier["budgets"] = {effort: b.model_dump(mode="json") for effort, b in source.budgets.items()}
    tier["engine"]["scheduling_policy"] = source.engine.scheduling_policy
    data["tiers"] = {name: tier}
    data["routing"].update(reasoning_tier=name, chat_tier=None)
    data["degradation"].update(DEGRADATION_OFF)
    data["lending"] = []
    return parse_policy(json.dumps(data), "one pool with the tiered policy's budgets")


def lineup(
    tiered: Policy, pool: Policy, out_dir: Path, names: tuple[str, str] = ("--policy", "--single-pool-policy"),
    peer_tier: str | None = None, peer_cpu_threads: str | None = None, chosen: Collection[str] = LINEUP,
) -> list[CompareTarget]:
    """The `chosen` targets of `LINEUP` from the tiered policy and the single pool's (`names` says where each came
    from), `tiered-lending` only where the tiered policy lends; the policy each serves is written to
    OUT/NAME/policy.yaml (and the peer's budgets to OUT/ray-serve-llm/budgets-policy.yaml)."""

    def written(name: str, policy: Policy, file: str = "policy.yaml") -> str:
        path = out_dir / name / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_policy(policy))
        return str(path)

    tiered_name, pool_name = names
    served: dict[str, tuple[Policy, str]] = {
        "one-pool": (without_degradation(pool), f"{pool_name}: one tier, every request one budget; degradation off"),
        "one-pool-budgets": (one_pool_with_budgets(tiered, pool), f"{pool_name}'s tier with {tiered_name}'s classifier, "
                             "per-class budgets and priorities, no chat tier; degradation off"),
        "tiered-no-degradation": (without_degradation(without_lending(tiered)),
                                  f"{tiered_name} with degradation and lending off"),
        "tiered-lending": (without_degradation(tiered), f"{tiered_name}'s lending with degradation off"),
        "tiered": (tiered, f"{tiered_name} as given"),
    }
    if not tiered.lending:
        del served["tiered-lending"]
    targets = [CompareTarget(name, "thinktier", written(name, policy), what)
               for name, (policy, what) in served.items() if name in chosen]
    if "ray-serve-llm" in chosen:
        targets.append(CompareTarget(
            "ray-serve-llm", "ray-serve-llm", written("ray-serve-llm", pool),
            f"Ray Serve LLM on {pool_name}'s tier, each request the budget of {tiered_name}'s classifier and budgets",
            tier=peer_tier, cpu_threads=peer_cpu_threads,
            budgets_policy=written("ray-serve-llm", tiered, "budgets-policy.yaml"),
        ))
    return targets
