"""The GPU bench's deadline order (issue 30): each request's priority by the router's own rule at the moment the bench
sends it, the configuration that uses it, the table's hard p90, and the device script's parts and workloads."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from thinktier.deployments.request.decision import RoutingRequest
from thinktier.deployments.request.routing import budget_decision
from thinktier.deployments.tier.protocol import TierChunk
from thinktier.loadtest.bench.gpu import gpu_bench
from thinktier.loadtest.bench.gpu.gpu_configs import CONFIGS, configured_tier, parse_plan, sent_priority
from thinktier.loadtest.bench.gpu.gpu_results import RequestRecord, Sample, markdown_table, summarize
from thinktier.loadtest.bench.gpu.gpu_workload import CLASS_EFFORT, BenchRequest, Workload, read_workloads
from thinktier.policies.loader import load_policy, load_policy_with
from thinktier.policies.schema import DifficultyClass

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "examples" / "h200-7b.yaml"
SCRIPT = ROOT / "scripts" / "gpu_deadline.sh"
IDLE = ROOT / "loadtest" / "results" / "gpu-deadline" / "workload-idle.json"


@pytest.fixture(scope="module")
def policy():
    return load_policy(POLICY)


def _request(index: int, klass: DifficultyClass, send_at_s: float, priority: int) -> BenchRequest:
    return BenchRequest(index, send_at_s, klass, f"p{index}", "What is 2 + 2?", 64, 16, priority)


def test_deadline_order_puts_a_long_waiting_hard_request_before_a_fresh_easy_one(policy) -> None:
    """Under class order the easy request always goes first; under deadline order a hard request sent 85 s before an
    easy one is due first (h200-7b: hard TTFVT objective 90 s, easy 10 s)."""
    hard = _request(0, "hard", 0.0, policy.routing.priority["hard"])
    easy = _request(1, "easy", 85.0, policy.routing.priority["easy"])
    t0 = 1_700_000_000.0
    by_class = CONFIGS["fp8-prio"]
    assert sent_priority(by_class, policy, easy, t0 + 85) < sent_priority(by_class, policy, hard, t0)
    by_deadline = CONFIGS["fp8-deadline"]
    assert sent_priority(by_deadline, policy, hard, t0) < sent_priority(by_deadline, policy, easy, t0 + 85)
    assert sent_priority(by_deadline, policy, hard, t0 + 85) > sent_priority(by_deadline, policy, easy, t0 + 85)
    assert sent_priority(CONFIGS["fp8"], policy, hard, t0) == sent_priority(CONFIGS["fp8"], policy, easy, t0) == 0


@pytest.mark.parametrize("klass", ["easy", "medium", "hard"])
def test_deadline_priority_is_what_the_router_gives_a_request_arriving_then(policy, klass: DifficultyClass) -> None:
    router = load_policy_with(POLICY, [("routing.priority_order", "deadline")])
    arrival = 1_700_000_123.456
    decision = budget_decision(router, RoutingRequest(prompt="p", reasoning_effort=CLASS_EFFORT[klass], arrival_s=arrival),
                               "reasoning", CLASS_EFFORT[klass], "gpu_bench", None)
    request = _request(0, klass, 0.0, policy.routing.priority[klass])
    assert sent_priority(CONFIGS["fp8-deadline"], policy, request, arrival) == decision.priority


def test_the_deadline_configuration_changes_only_the_priority_order(policy) -> None:
    base = policy.tiers["reasoning"]
    deadline, by_class = CONFIGS["fp8-deadline"], CONFIGS["fp8-prio"]
    assert (deadline.priority_order, by_class.priority_order, CONFIGS["fp8"].priority_order) == ("deadline", "class", "class")
    assert configured_tier(base, deadline, "/m", 2.0, 0.3) == configured_tier(base, by_class, "/m", 2.0, 0.3)
    assert configured_tier(base, deadline, "/m", 2.0, 0.3).engine.scheduling_policy == "priority"


class _Engine:
    """Stands in for TierEngine: records what it is sent and when, answers at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, float]] = []
        self._stats = SimpleNamespace(generation_tokens_total=0, offload_store_bytes_total=0.0, offload_load_bytes_total=0.0,
                                      resume_lookups_total=0, resume_lookup_tokens_total=0, resume_prefix_hits_total=0)

    def stats(self) -> SimpleNamespace:
        return SimpleNamespace(kv_occupancy=0.1, num_running=0, num_waiting=0, num_preemptions_total=0,
                               preemptions_resumed_from_host_total=0, preempted_tokens_total=0,
                               kv_offload_loaded_tokens_total=0, preempted_tokens_recomputed_total=0)

    async def generate(self, request: Any):
        self.sent.append((request, time.time()))
        yield TierChunk(content="4", finish_reason="stop", reasoning_tokens=3, answer_tokens=1)


def test_the_runner_stamps_each_deadline_when_it_sends_the_request(policy) -> None:
    """The hard request leaves at once and the easy one 0.3 s later: each priority is its send time plus its class's
    objective, in milliseconds, and the report keeps it."""
    requests = (_request(0, "hard", 0.0, 2), _request(1, "easy", 0.3, 0))
    engine = _Engine()
    summary = asyncio.run(gpu_bench._Runner(engine, policy, CONFIGS["fp8-deadline"]).run(
        Workload("W", 1.0, 1.0, 0.3, 1, "easy=1,hard=1", requests), drain_s=5))
    (hard, hard_sent), (easy, easy_sent) = engine.sent
    assert abs(hard.priority - 1000 * (hard_sent + policy.slos["hard"].ttfvt_s)) <= 5
    assert abs(easy.priority - 1000 * (easy_sent + policy.slos["easy"].ttfvt_s)) <= 5
    assert 250 <= 1000 * (easy_sent - hard_sent) <= 400 and easy.priority < hard.priority
    assert [r["priority"] for r in summary["requests"]] == [hard.priority, easy.priority]
    engine = _Engine()
    asyncio.run(gpu_bench._Runner(engine, policy, CONFIGS["fp8-prio"]).run(
        Workload("W", 1.0, 1.0, 0.3, 1, "easy=1,hard=1", requests), drain_s=5))
    assert [r.priority for r, _ in engine.sent] == [2, 0]


def test_table_shows_the_hard_p90_the_aim_is_stated_in(policy) -> None:
    records = [RequestRecord(i, "hard", 0.0, ttft_s=0.1, ttfvt_s=1.0, e2e_s=float(i)) for i in range(1, 12)]
    samples = [Sample(0, 0.1, 0, 0, 0, 0, 0.0, 0.0), Sample(1, 0.2, 0, 0, 0, 100, 0.0, 0.0)]
    summary = summarize(records, samples, policy.slos, wall_s=12.0, duration_s=1.0)
    head, _, row = markdown_table([{"results": [{"config": "fp8", "kv_capacity_tokens": 1, "workloads": {"B": summary}}]}]
                                  ).splitlines()
    column = head.split(" | ").index("hard E2E p50 / p90 / p99 (s)")
    assert row.split(" | ")[column] == "6.0 / 10.0 / 10.9"


def _script_parts() -> dict[str, list[str]]:
    """Each part's bench arguments as the device script passes them, its variables filled in."""
    text = SCRIPT.read_text()
    variables = {name: str(ROOT / path) for name, path in re.findall(r"^(\w+)=(loadtest/\S+)$", text, re.M)}
    parts = re.findall(r"^  (\w)\) plan=\((.*?)\)(?:; drain=(\d+))? ;;$", text, re.M)
    default_drain = re.search(r"^drain=(\d+)$", text, re.M).group(1)  # type: ignore[union-attr]
    return {part: [*re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], args).replace('"', "").split(),
                   "--drain-s", drain or default_drain]
            for part, args, drain in parts}


def test_the_device_script_runs_three_orders_at_one_to_two_times_b_then_a_sustained_overload() -> None:
    parts = _script_parts()
    assert sorted(parts) == ["a", "b", "c", "d", "e", "f", "g", "h"]
    plans, drains = {}, {}
    for part, args in parts.items():
        workloads = read_workloads([v for k, v in itertools.pairwise(args) if k == "--workload"])
        plans[part] = parse_plan([v for k, v in itertools.pairwise(args) if k == "--config"], workloads)
        drains[part] = int(args[-1])
    heavier, sustained = ["Bx1.5", "Bx2"], ["Bx1.5-120s"]
    assert plans == {"a": [("fp8", ["B"]), ("fp8-prio", ["B"])], "b": [("fp8-deadline", ["B", "idle"])],
                     "c": [("fp8", heavier)], "d": [("fp8-prio", heavier)], "e": [("fp8-deadline", heavier)],
                     "f": [("fp8-prio", sustained)], "g": [("fp8-deadline", sustained)], "h": [("fp8", sustained)]}
    assert drains == {"a": 240, "b": 240, "c": 240, "d": 240, "e": 240, "f": 300, "g": 300, "h": 360}
    assert '--drain-s "$drain"' in SCRIPT.read_text()


def test_the_sustained_overload_is_bx1_5_held_for_120_seconds() -> None:
    """Same generator, rate and mix as Bx1.5, four times the arrival window: the queue then holds requests whose
    deadlines cross (a hard request outranks an easy one sent more than 80 s after it)."""
    parts = _script_parts()
    loads = read_workloads([v for part in ("c", "f") for k, v in itertools.pairwise(parts[part]) if k == "--workload"])
    short, long = loads["Bx1.5"], loads["Bx1.5-120s"]
    assert (long.rate, long.mix, long.seed, long.duration_s) == (short.rate, short.mix, short.seed, 120.0)
    assert len(long.requests) == 1465 and max(r.send_at_s for r in long.requests) > 110

    def budgets(workload: Workload) -> set[tuple[str, int]]:
        return {(r.difficulty, r.thinking_tokens) for r in workload.requests}

    assert budgets(long) == budgets(short)


def test_the_heavier_loads_ask_one_and_a_half_and_two_times_the_tokens_of_b_with_its_mix_and_budgets() -> None:
    """The issue's 1.5x and 2x, measured in what the engine must generate (thinking plus answer budgets)."""
    parts = _script_parts()
    loads = read_workloads([v for part in ("a", "c") for k, v in itertools.pairwise(parts[part]) if k == "--workload"])

    def tokens(workload: Workload) -> int:
        return sum(r.thinking_tokens + r.answer_tokens for r in workload.requests)

    base = loads["B"]
    assert tokens(loads["Bx1.5"]) / tokens(base) == pytest.approx(1.5, abs=0.05)
    assert tokens(loads["Bx2"]) / tokens(base) == pytest.approx(2.0, abs=0.05)
    budgets = {(r.difficulty, r.thinking_tokens, r.answer_tokens) for r in base.requests}
    for name in ("Bx1.5", "Bx2"):
        assert {(r.difficulty, r.thinking_tokens, r.answer_tokens) for r in loads[name].requests} == budgets
        assert max(r.send_at_s for r in loads[name].requests) <= max(r.send_at_s for r in base.requests) + 1


def test_the_idle_workload_has_one_easy_request_in_flight_at_a_time(policy) -> None:
    """Easy requests at the policy's easy budget, at least 5.5 s apart: at batch 1 an easy request's 768 tokens take
    about 4 s on the H200 (h200_step_profile.json: 4.8 ms a step)."""
    workload = Workload.from_json(json.loads(IDLE.read_text()))
    budget = policy.tiers["reasoning"].budgets["low"]
    assert len(workload.requests) >= 20 and {r.difficulty for r in workload.requests} == {"easy"}
    assert {(r.thinking_tokens, r.answer_tokens) for r in workload.requests} == {(budget.thinking_tokens, budget.answer_tokens)}
    sends = [r.send_at_s for r in workload.requests]
    assert min(b - a for a, b in itertools.pairwise(sends)) >= 5.5


def test_the_simulated_engine_evicts_by_priority_the_class_order_never_an_easy_request(tmp_path: Path) -> None:
    """The victims the H100 showed (gpu-deadline/README.md): under FCFS the newest running request is preempted, most
    often an easy one; under the class order the lowest priority one, never an easy request while others run."""
    from thinktier.cli.main import main

    d = "loadtest/results/gpu-deadline"
    out = tmp_path / "sim.json"
    assert main(["bench", "gpu", "simulate", "--policy", "policies/examples/h200-7b.yaml",
                 "--workload", f"W={d}/workload-Bx2.json", "--config", "fp8:W", "--config", "fp8-prio:W",
                 "--step-profile", f"{d}/h100_step_profile.json", "--serving-overhead-us", "15", "--drain-s", "240",
                 "--out", str(out)]) == 0
    fcfs, by_class = ({k: c["preemptions"] for k, c in r["workloads"]["W"]["per_class"].items()}
                      for r in json.loads(out.read_text())["results"])
    assert by_class["easy"] == 0 and by_class["hard"] > 0
    assert fcfs["easy"] > max(fcfs["medium"], fcfs["hard"])
