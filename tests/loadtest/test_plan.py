"""`thinktier plan`: the simulated replica's timing and scheduling, the simulation running the project's real decision
code (swapped here to see the result change), determinism, the command's output, and the simulator against the
recorded H200 runs it is validated on."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from thinktier.cli.main import main
from thinktier.deployments.request.routing import Overloaded
from thinktier.loadtest.sim.plan import PlanInputs, min_replicas_for_slo, simulate
from thinktier.loadtest.sim.sim_cluster import SimSettings, Simulation
from thinktier.loadtest.sim.sim_profile import Geometry, HardwareProfile, profile_for
from thinktier.loadtest.sim.sim_replica import SimReplica, SimRequest
from thinktier.loadtest.sim.sim_validate import fullstack_case, recorded_report
from thinktier.loadtest.sim.sim_workload import WorkloadSpec
from thinktier.loadtest.workload import Mix
from thinktier.policies.loader import load_policy, with_setting
from thinktier.policies.schema import Stragglers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "policies" / "examples"
ONEPOOL = EXAMPLES / "gpu-onepool-haproxy.yaml"
FULLSTACK = ROOT / "loadtest" / "results" / "gpu-fullstack"
PROFILE = HardwareProfile("test", 0.005, 1e-4, 1e-8, 1e-5, Geometry(28, 4, 128, 14.2), 140.0)


def replica(kv: int, priority: bool) -> SimReplica:
    return SimReplica("r", PROFILE, kv, max_num_seqs=256, max_batched_tokens=8192, priority_scheduling=priority,
                      stragglers=Stragglers())


def request(index: int, priority: int = 0, thinking: int = 100, answer: int = 50, at: float = 0.0) -> SimRequest:
    return SimRequest(index, "easy", f"p{index}", at, prompt_tokens=20, thinking_tokens=thinking, answer_tokens=answer,
                      priority=priority)


# ---- one replica -------------------------------------------------------------------------------------------------


def test_a_lone_request_thinks_then_answers_at_the_profiles_step_time() -> None:
    engine, r = replica(100_000, priority=False), request(0)
    engine.submit(r, 0.0)
    engine.advance_to(60.0)
    prefill = 20 * PROFILE.prefill_s_per_token
    assert r.first_token_s == pytest.approx(prefill + PROFILE.step_s(1, 0.0))
    assert r.first_answer_s == pytest.approx(prefill + 100 * PROFILE.step_s(1, 20), rel=1e-6)
    assert r.end_s == pytest.approx(r.first_answer_s + 50 * PROFILE.step_s(1, 120), rel=1e-6)
    assert (engine.stats().num_running, engine.finished) == (0, [r])


def test_a_full_kv_cache_preempts_the_lowest_priority_which_recomputes_later() -> None:
    for priority, victim in ((True, 0), (False, 1)):
        engine = replica(400, priority)
        low, high = request(0, priority=2, thinking=300, answer=10), request(1, priority=0, thinking=300, answer=10, at=0.01)
        engine.submit(low, 0.0)
        engine.submit(high, 0.01)
        engine.advance_to(120.0)
        preempted = (low, high)[victim]
        assert engine.preemptions_total >= 1 and preempted.preemptions >= 1
        assert (low, high)[1 - victim].preemptions == 0
        assert low.end_s is not None and high.end_s is not None  # both finish: the victim recomputed its tokens
        assert preempted.end_s > (low, high)[1 - victim].end_s  # type: ignore[operator]


def test_kv_capacity_follows_the_policy_and_the_kv_dtype() -> None:
    tier = load_policy(ONEPOOL).tiers["reasoning"]  # 2 GiB of FP8 KV
    profile = profile_for(tier)
    assert profile.kv_tokens(tier) == 74_898  # vLLM reported 74,896 for this geometry (block rounding)
    bf16 = tier.model_copy(update={"engine": tier.engine.model_copy(update={"kv_cache_dtype": "auto"})})
    assert profile.kv_tokens(bf16) == 74_898 // 2


# ---- the cluster runs the real decision code -----------------------------------------------------------------------


def small(policy_path: Path = ONEPOOL, rate: float = 4.0, duration: float = 20.0, **settings: object) -> PlanInputs:
    spec = WorkloadSpec(Mix.parse("easy=0.5,medium=0.3,hard=0.1,chat=0.1"), rate, 0.5, duration, 3)
    return PlanInputs(load_policy(policy_path), spec, settings=SimSettings(**settings))  # type: ignore[arg-type]


def test_the_routing_decision_is_the_real_decide() -> None:
    baseline = simulate(small())
    assert baseline.run.overall.shed == 0 and baseline.run.overall.ok == baseline.run.overall.requests

    def refuse(*args: object) -> None:
        raise Overloaded("saturated", 5)

    refused = simulate(small(), decide_fn=refuse)
    assert refused.run.overall.shed == refused.run.overall.requests > 0


def test_the_deadline_order_reaches_the_simulated_engines_as_arrival_plus_the_class_objective() -> None:
    inputs = small()
    policy = inputs.policy.model_copy(update={"routing": inputs.policy.routing.model_copy(
        update={"priority_order": "deadline"})})
    served = [r for r in simulate(replace(inputs, policy=policy)).sim.requests if r.tier is not None]
    assert served
    for request in served:  # the vLLM priority each simulated request carried: its deadline on the simulator's clock
        objectives = {round(1000 * (request.arrival_s + slo.ttfvt_s)) for slo in policy.slos.values()}
        assert request.priority in objectives


def test_the_replica_choice_is_the_real_router_score() -> None:
    spread = Counter(r.replica for r in simulate(small()).sim.requests)
    assert len(spread) == 2 and min(spread.values()) > 0
    # A score that prefers whichever replica already has the most work sends everything to one replica.
    piled = Counter(r.replica for r in simulate(small(), score_fn=lambda stats, queue, hard, weights: -queue).sim.requests)
    assert len(piled) == 1


def test_the_replica_count_is_the_real_autoscaler_decision() -> None:
    policy = with_setting(load_policy(ONEPOOL), "tiers.reasoning.replicas", '{"min": 1, "max": 4}')
    policy = with_setting(policy, "tiers.reasoning.autoscaling.signal", "kv_and_stragglers")  # the project's own
    inputs = replace(small(rate=0.5, startup_s=2.0), policy=policy)
    steady = simulate(inputs)
    assert {t.tier: t.replicas_max for t in steady.tiers} == {"reasoning": 1}
    grown = simulate(inputs, decide_replicas_fn=lambda state, sample, targets, replicas, now: (replicas.max, state))
    assert {t.tier: t.replicas_max for t in grown.tiers} == {"reasoning": 4}


def test_tiers_of_a_shared_pool_split_its_total_instead_of_each_growing_to_its_max() -> None:
    policy = load_policy(EXAMPLES / "gpu-tiered-haproxy.yaml")
    for name in ("reasoning", "chat"):
        policy = with_setting(policy, f"tiers.{name}.replicas", '{"min": 1, "max": 6}')
        policy = with_setting(policy, f"tiers.{name}.autoscaling.signal", "kv_and_stragglers")
    inputs = replace(small(rate=0.5, startup_s=2.0), policy=policy)
    greedy = {"decide_replicas_fn": lambda state, sample, targets, replicas, now: (replicas.max, state)}
    alone = simulate(inputs, **greedy)  # type: ignore[arg-type]
    assert {t.tier: t.replicas_max for t in alone.tiers} == {"reasoning": 6, "chat": 6}
    pooled = with_setting(policy, "shared_capacity", '[{"tiers": ["reasoning", "chat"], "total": 4}]')
    shared = simulate(replace(inputs, policy=pooled), **greedy)  # type: ignore[arg-type]
    assert {t.tier: t.replicas_max for t in shared.tiers} == {"reasoning": 2, "chat": 2}
    targets: dict[float, int] = Counter()
    for point in shared.sim.timeline:
        targets[point.t_s] += point.target
    assert max(targets.values()) <= 4


def test_a_plan_is_the_same_for_the_same_seed() -> None:
    first, second = simulate(small(EXAMPLES / "gpu-tiered-haproxy.yaml")), simulate(small(EXAMPLES / "gpu-tiered-haproxy.yaml"))
    assert first.report.model_dump() == second.report.model_dump()
    other = simulate(replace(small(), workload=replace(small().workload, seed=4)))
    assert other.report.model_dump() != simulate(small()).report.model_dump()


def test_the_fewest_replicas_that_meet_the_slos() -> None:
    counts, result = min_replicas_for_slo(small(rate=1.0), target=0.95)
    assert counts == {"reasoning": 1}  # one request a second of this mix fits one replica
    assert result.run.overall.slo_attainment >= 0.95


def test_a_sweep_knob_that_is_not_a_field_says_which_fields_exist() -> None:
    with pytest.raises(ValueError, match=r"'engin' is not a field here; found \['autoscaling', 'budgets'"):
        with_setting(load_policy(ONEPOOL), "tiers.reasoning.engin.scheduling_policy", "fcfs")
    assert with_setting(load_policy(ONEPOOL), "tiers.reasoning.engine.scheduling_policy", "priority").tiers[
        "reasoning"
    ].engine.scheduling_policy == "priority"


def test_the_plan_command_writes_the_report_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan"
    assert main(["plan", "--policy", str(ONEPOOL), "--rate", "2", "--duration", "20", "--out", str(out)]) == 0
    assert "goodput" in capsys.readouterr().out
    text = (out / "plan.md").read_text()
    assert "| reasoning | 2 / 2.0 / 2 |" in text and "| easy |" in text and "cost per 1,000 answers" in text
    assert json.loads((out / "plan.json").read_text())["requests"] > 20
    assert all((out / f).stat().st_size > 1000 for f in ("plan_timeline.png", "plan_latency_cdf.png"))


# ---- validation against the H200 runs --------------------------------------------------------------------------------


def test_engines_sharing_a_gpu_slow_each_others_device_work_and_whole_gpu_replicas_share_nothing() -> None:
    policy = load_policy(EXAMPLES / "gpu-autoscaling.yaml")  # reasoning 1-3 and chat 1, each a quarter of a GPU
    sim = Simulation(policy, {n: profile_for(t) for n, t in policy.tiers.items()}, SimSettings(autoscale=False,
                     replicas={"reasoning": 3, "chat": 1}))
    assert len(sim.devices) == 1 and sorted(len(d.replicas) for d in sim.devices) == [4]  # packed first-fit
    busy, idle = sim.tiers["reasoning"].replicas[:2]
    for i in range(40):
        busy.submit(request(i, thinking=2000), 0.0)
    sim.share_devices()
    assert idle.device_slowdown == pytest.approx(1 + busy.device_duty()) and 0.3 < busy.device_duty() < 1
    assert busy.device_slowdown == 1.0  # the others are idle
    alone = SimReplica("alone", busy.profile, busy.kv_capacity, 256, 8192, True, Stragglers())
    for i in range(40):
        alone.submit(request(i, thinking=2000), 0.0)
    idle.submit(request(99, thinking=2000), 0.0)
    idle.advance_to(0.0)  # admitted: now it computes too
    sim.share_devices()
    busy.advance_to(120.0)
    alone.advance_to(120.0)
    assert busy.device_slowdown > 1.5
    shared_end, alone_end = (max(r.end_s for r in e.finished) for e in (busy, alone))  # type: ignore[type-var]
    assert shared_end > 1.3 * alone_end  # the same batch on a GPU shared with a busy engine
    whole = load_policy(EXAMPLES / "gpu-tiered-haproxy.yaml")
    split = Simulation(whole, {n: profile_for(t) for n, t in whole.tiers.items()}, SimSettings(autoscale=False))
    assert split.devices == []


def test_the_simulator_reproduces_the_h200_full_stack_runs_within_25_percent() -> None:
    for name, policy in (("onepool", ONEPOOL), ("tiered-split", EXAMPLES / "gpu-tiered-haproxy.yaml")):
        case = fullstack_case(name, FULLSTACK / f"{name}-report.json", policy)
        figures = {f.name: f for f in case.figures}
        recorded = recorded_report(FULLSTACK / f"{name}-report.json")
        real = recorded.runs[0]
        assert real.window_s == recorded.settings["duration_s"] < real.duration_s  # goodput per second of arrivals
        assert figures["goodput req/s"].real == real.goodput_rps
        for figure in ("goodput req/s", "output tok/s", "easy TTFVT p99 s", "hard goodput req/s"):
            assert abs(figures[figure].error) <= 0.25, (name, figures[figure])  # type: ignore[arg-type]


def test_a_sweep_runs_one_plan_per_value_and_takes_json_values(tmp_path: Path) -> None:
    priorities = '{"easy":0,"medium":1,"hard":2},{"easy":0,"medium":0,"hard":0}'
    argv = ["plan", "--policy", str(ONEPOOL), "--rate", "2", "--duration", "10", "--out", str(tmp_path),
            "--set", "tiers.reasoning.engine.scheduling_policy=priority", "--sweep", f"routing.priority={priorities}"]
    assert main(argv) == 0
    rows = [line for line in (tmp_path / "sweep.md").read_text().splitlines() if line.startswith('| {"easy"')]
    assert len(rows) == 2
    assert all(re.search(r"\| \d+ \| \d+ / \d+ / \d+ \|", row) for row in rows), rows  # preemptions, then by class
    assert len(list(tmp_path.glob("routing.priority=*/plan.md"))) == 2
    assert main(["plan", "--policy", str(ONEPOOL), "--out", str(tmp_path), "--sweep", "routing.nope=1,2"]) == 1


def test_bursty_reasoning_load_has_the_published_shape() -> None:
    """The shapes the ICLR 2026 study of reasoning-model serving reports: under bursty reasoning traffic the reasoning
    tier's KV occupancy swings and plateaus near 100% while the chat workload's stays low, and a tail of stragglers
    holds the batch after the arrivals stop."""
    policy = load_policy(EXAMPLES / "gpu-tiered-haproxy.yaml")  # one reasoning replica on one H200, chat on another
    spec = WorkloadSpec(Mix.parse("easy=0.4,medium=0.3,hard=0.2,chat=0.1"), 3.0, 0.25, 240.0, 3)
    timeline = simulate(PlanInputs(policy, spec, settings=SimSettings(autoscale=False, drain_s=400))).sim.timeline
    reasoning = [p for p in timeline if p.tier == "reasoning"]
    kv = [p.kv_mean for p in reasoning]
    full = [k >= 0.9 for k in kv]
    longest, run = 0, 0
    for f in full:
        run = run + 1 if f else 0
        longest = max(longest, run)
    assert longest >= 10  # a plateau near full, seconds long
    first_full = full.index(True)
    drop = next(i for i in range(first_full, len(kv)) if kv[i] < 0.6)
    assert any(k >= 0.95 for k in kv[drop:])  # it empties and fills again: it swings
    assert max(p.kv_max for p in timeline if p.tier == "chat") < 0.2
    peak = max(p.running for p in reasoning)
    tail = [p for p in reasoning if p.t_s > spec.duration_s and 0 < p.running <= 0.25 * peak]
    assert any(p.stragglers >= p.running / 2 for p in tail)  # the last few running requests are stragglers


def test_plans_laid_out_as_a_compare_folder_are_summarized_like_load_tests(tmp_path: Path) -> None:
    for target, knob in (("one-pool", "priority"), ("fcfs-pool", "fcfs")):
        (tmp_path / target).mkdir()
        (tmp_path / target / "target.json").write_text(json.dumps({"kind": "simulated", "policy": str(ONEPOOL), "what": knob}))
        for seed in ("0", "1"):
            assert main(["plan", "--policy", str(ONEPOOL), "--set", f"tiers.reasoning.engine.scheduling_policy={knob}",
                         "--rate", "2", "--duration", "10", "--seed", seed, "--no-autoscale", "--requests",
                         "--out", str(tmp_path / target / f"seed-{seed}")]) == 0
    written = {p.name for p in (tmp_path / "one-pool" / "seed-0").iterdir()}
    assert {"plan.json", "report.json", "requests.jsonl"} <= written
    assert main(["loadtest", "compare", "--summarize", str(tmp_path), "--baseline", "one-pool"]) == 0
    text = (tmp_path / "compare.md").read_text()
    assert "over seeds 0, 1" in text and "| one-pool | fcfs-pool |" in text
