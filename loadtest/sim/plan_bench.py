"""`thinktier bench planner`: the simulator against every recorded run it can replay (validation.md), and its speed at
fleet scale (speed.json): 1,000 reasoning replicas for one simulated hour at 10,000 requests a minute."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

from thinktier.loadtest.sim.plan import PlanInputs, simulate
from thinktier.loadtest.sim.sim_cluster import SimSettings
from thinktier.loadtest.sim.sim_profile import DEFAULT_PROFILES
from thinktier.loadtest.sim.sim_validate import (
    Case,
    EngineRun,
    engine_case,
    fit_engine_overhead,
    fullstack_case,
    markdown,
)
from thinktier.loadtest.sim.sim_workload import WorkloadSpec
from thinktier.loadtest.workload import Mix
from thinktier.policies.loader import load_policy, with_setting

ROOT = Path(__file__).resolve().parents[2]
RESULTS, EXAMPLES = ROOT / "loadtest" / "results", ROOT / "policies" / "examples"
FULLSTACK = RESULTS / "gpu-fullstack"
GPU = RESULTS / "gpu"
GPU_SCALING = RESULTS / "gpu-scaling"
GPU_DEADLINE = RESULTS / "gpu-deadline"
COMPARE = RESULTS / "compare-after-layout"

FULLSTACK_CASES = (
    ("H200 x2 full stack, one pool (the serving overhead was fitted on this run)", "onepool", "gpu-onepool-haproxy.yaml"),
    ("H200 x2 full stack, tiered on split GPUs", "tiered-split", "gpu-tiered-haproxy.yaml"),
    ("H200 x2 full stack, tiered on shared GPUs", "tiered-shared", "gpu-fullstack-tiered.yaml"),
)
H200_7B = EXAMPLES / "h200-7b.yaml"
ENGINE_CASES = (
    ("H200 engine, workload A, FCFS", EngineRun(GPU / "run-kv.json", "fp8", GPU / "workload-A.json", H200_7B)),
    ("H200 engine, workload B, FCFS", EngineRun(GPU / "run-kv.json", "fp8", GPU / "workload-B.json", H200_7B)),
    ("H200 engine, workload B, priority", EngineRun(GPU / "run-sched.json", "fp8-prio", GPU / "workload-B.json", H200_7B)),
    ("H200 engine, workload B, FCFS, full drain",
     EngineRun(GPU_SCALING / "priority" / "run-priority.json", "fp8", GPU / "workload-B.json", H200_7B, "B")),
    ("H200 engine, workload B, priority, full drain",
     EngineRun(GPU_SCALING / "priority" / "run-priority-plain.json", "fp8-prio", GPU / "workload-B.json", H200_7B, "B")),
    ("H200 engine, workload B, easy-first priority (0/1/1), full drain",
     EngineRun(GPU_SCALING / "priority" / "run-priority.json", "fp8-prio",
               GPU_SCALING / "priority" / "workload-B-easy-first.json", H200_7B, "Bef")),
)
H100_PROFILE = GPU_DEADLINE / "h100_step_profile.json"
"""Measured on an H100 on 2026-12-06 (`run-profile.json`): the device's own step time by batch and context."""


def _h100(run: str, config: str, workload: Path, step: str) -> EngineRun:
    return EngineRun(GPU_DEADLINE / run, config, workload, H200_7B, step, H100_PROFILE)


WORKLOAD_B, WORKLOAD_BX15, WORKLOAD_BX2 = (GPU / "workload-B.json", GPU_DEADLINE / "workload-Bx1.5.json",
                                          GPU_DEADLINE / "workload-Bx2.json")
WORKLOAD_BX15_HELD = GPU_DEADLINE / "workload-Bx1.5-120s.json"
H100_FIT = _h100("run-d.json", "fp8-prio", WORKLOAD_BX15, "Bx1.5")
"""Today's engine (the project's budget processor, async scheduling) on an H100 at 1.5x workload B, class order: the
run the H100 cases' serving overhead is fitted on."""
H100_CASES = (
    ("1x B, FCFS", _h100("run-a.json", "fp8", WORKLOAD_B, "B")),
    ("1x B, deadline order", _h100("run-b.json", "fp8-deadline", WORKLOAD_B, "B")),
    ("1.5x B, FCFS", _h100("run-c.json", "fp8", WORKLOAD_BX15, "Bx1.5")),
    ("2x B, FCFS", _h100("run-c.json", "fp8", WORKLOAD_BX2, "Bx2")),
    ("1.5x B, class order (the fitted run)", H100_FIT),
    ("1.5x B, class order, a second run", _h100("run-d-repeat.json", "fp8-prio", WORKLOAD_BX15, "Bx1.5")),
    ("2x B, class order", _h100("run-d.json", "fp8-prio", WORKLOAD_BX2, "Bx2")),
    ("1.5x B, deadline order", _h100("run-e.json", "fp8-deadline", WORKLOAD_BX15, "Bx1.5")),
    ("2x B, deadline order", _h100("run-e.json", "fp8-deadline", WORKLOAD_BX2, "Bx2")),
    ("1.5x B held 120 s, class order", _h100("run-f.json", "fp8-prio", WORKLOAD_BX15_HELD, "Bx1.5-120s")),
    ("1.5x B held 120 s, deadline order", _h100("run-g.json", "fp8-deadline", WORKLOAD_BX15_HELD, "Bx1.5-120s")),
    ("1.5x B held 120 s, FCFS", _h100("run-h.json", "fp8", WORKLOAD_BX15_HELD, "Bx1.5-120s")),
)
"""The H100 runs of issue 30 (`loadtest/results/gpu-deadline/`), on the H100's own step profile with the serving
overhead (the engine process's cost per sequence and step) fitted on `H100_FIT`; the other eleven runs test that one
number out of sample. The last three were forecast before they ran (loadtest/results/plan/forecast-gpu-deadline.md)."""


H100_MATRIX = RESULTS / "gpu-matrix"
H100_MATRIX_RUNS = (("one-pool-budgets", (0, 1, 2)), ("tiered", (0, 1, 2)), ("tiered-no-degradation", (0,)),
                    ("tiered-lending", (0,)))
"""Issue 32's matrix on one H100 (`loadtest/results/gpu-matrix/`): full-stack runs of today's stack, replayed on the
H100 profile with the serving overhead fitted on the bare engine (`H100_FIT`): nothing fitted on them. The one-pool
target kept only its summary."""


AUTOSCALING_CASE = (
    "H200 x1 full stack, reasoning tier autoscaled 1-3 on KV/stragglers (replicas share the GPU)",
    GPU_SCALING / "autoscaling" / "kv-report.json", EXAMPLES / "gpu-autoscaling.yaml",
)
AUTOSCALING_STARTUP_S = 54.0
"""Measured there: a new replica's process to it being routable (autoscaling.md)."""
CPU_CASES = (
    ("2-core CPU full stack, tiered (real model: recorded thinking lengths)", "thinktier-tiered", "compare-tiered.yaml"),
    ("2-core CPU full stack, single pool (real model: recorded thinking lengths)", "thinktier-single-pool",
     "compare-single-pool.yaml"),
)


def validation_cases() -> list[Case]:
    """Every replayable run beside its simulation (the H100 ones with the serving overhead fitted on `H100_FIT`)."""
    cases = [
        fullstack_case(title, FULLSTACK / f"{name}-report.json", EXAMPLES / policy) for title, name, policy in FULLSTACK_CASES
    ]
    title, report, policy = AUTOSCALING_CASE
    cases.append(fullstack_case(title, report, policy, settings=SimSettings(startup_s=AUTOSCALING_STARTUP_S)))
    cases += [engine_case(title, run) for title, run in ENGINE_CASES]
    cases.append(engine_case("H100 engine, 1.5x B, class order, the default profile (the H200's, its serving overhead "
                             "fitted on the H200 full stack with vLLM's budget processor)", replace(H100_FIT, profile_path=None)))
    overhead = fit_engine_overhead(H100_FIT)
    cases += [engine_case(f"H100 engine, {title}, serving overhead {overhead * 1e6:.1f} us fitted on 1.5x B class order",
                          run, overhead) for title, run in H100_CASES]
    cases += [
        fullstack_case(f"H100 x1 full stack, issue 32's matrix, {target}, seed {seed} (H100 profile, the engine's "
                       f"{overhead * 1e6:.1f} us)", H100_MATRIX / target / f"seed-{seed}" / "report.json",
                       H100_MATRIX / target / "policy.yaml", profile_path=H100_PROFILE, overhead_s_per_seq=overhead,
                       lending=target == "tiered-lending")
        for target, seeds in H100_MATRIX_RUNS for seed in seeds
    ]
    if DEFAULT_PROFILES["cpu"].exists():
        cases += [
            fullstack_case(title, COMPARE / name / "report.json", EXAMPLES / policy, f"recorded:{COMPARE / name / n}")
            for title, name, policy in CPU_CASES
            for n in ("requests.jsonl",)
        ]
    return cases


def speed(replicas: int = 1000, rate: float = 10_000 / 60, duration_s: float = 3600.0) -> dict[str, object]:
    """The fleet policy with a fixed reasoning pool of `replicas` (chat: a tenth), under `rate` requests/s."""
    policy = load_policy(EXAMPLES / "fleet-h200.yaml")
    for knob, value in (("tiers.reasoning.replicas.max", replicas), ("tiers.chat.replicas.max", replicas // 10)):
        policy = with_setting(policy, knob, str(value))
    spec = WorkloadSpec(Mix.parse("easy=0.5,medium=0.3,hard=0.1,chat=0.1"), rate, 0.5, duration_s, 1)
    settings = SimSettings(autoscale=False, replicas={"reasoning": replicas, "chat": replicas // 10}, drain_s=300)
    started = time.monotonic()
    result = simulate(PlanInputs(policy, spec, settings=settings))
    return {
        "command": "thinktier bench planner",
        "replicas": {"reasoning": replicas, "chat": replicas // 10},
        "rate_rps": rate,
        "simulated_s": result.sim.end_s,
        "requests": len(result.sim.requests),
        "wall_s": round(time.monotonic() - started, 1),
        "aim_wall_s": 300,
        "goodput_rps": result.run.goodput_rps,
        "tiers": [asdict(t) for t in result.tiers],
    }


def run(out: Path, with_speed: bool = True) -> tuple[str, dict[str, object] | None]:
    out.mkdir(parents=True, exist_ok=True)
    cases = validation_cases()
    text = markdown(cases)
    (out / "validation.md").write_text(text)
    measured = speed() if with_speed else None
    if measured is not None:
        (out / "speed.json").write_text(json.dumps(measured, indent=1) + "\n")
    return text, measured
