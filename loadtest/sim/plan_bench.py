"""`thinktier bench planner`: the simulator against every recorded run it can replay (validation.md), and its speed at
fleet scale (speed.json): 1,000 reasoning replicas for one simulated hour at 10,000 requests a minute."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from thinktier.loadtest.sim.plan import PlanInputs, simulate
from thinktier.loadtest.sim.sim_cluster import SimSettings
from thinktier.loadtest.sim.sim_profile import DEFAULT_PROFILES
from thinktier.loadtest.sim.sim_validate import Case, engine_case, fullstack_case, markdown
from thinktier.loadtest.sim.sim_workload import WorkloadSpec
from thinktier.loadtest.workload import Mix
from thinktier.policies.loader import load_policy, with_setting

ROOT = Path(__file__).resolve().parents[2]
RESULTS, EXAMPLES = ROOT / "loadtest" / "results", ROOT / "policies" / "examples"
FULLSTACK = RESULTS / "gpu-fullstack"
GPU = RESULTS / "gpu"
GPU_SCALING = RESULTS / "gpu-scaling"
COMPARE = RESULTS / "compare-after-layout"

FULLSTACK_CASES = (
    ("H200 x2 full stack, one pool (the serving overhead was fitted on this run)", "onepool", "gpu-onepool-haproxy.yaml"),
    ("H200 x2 full stack, tiered on split GPUs", "tiered-split", "gpu-tiered-haproxy.yaml"),
    ("H200 x2 full stack, tiered on shared GPUs", "tiered-shared", "gpu-fullstack-tiered.yaml"),
)
ENGINE_CASES = (
    ("H200 engine, workload A, FCFS", GPU / "run-kv.json", "fp8", GPU / "workload-A.json", None),
    ("H200 engine, workload B, FCFS", GPU / "run-kv.json", "fp8", GPU / "workload-B.json", None),
    ("H200 engine, workload B, priority", GPU / "run-sched.json", "fp8-prio", GPU / "workload-B.json", None),
    ("H200 engine, workload B, FCFS, full drain", GPU_SCALING / "priority" / "run-priority.json", "fp8",
     GPU / "workload-B.json", "B"),
    ("H200 engine, workload B, priority, full drain", GPU_SCALING / "priority" / "run-priority-plain.json", "fp8-prio",
     GPU / "workload-B.json", "B"),
    ("H200 engine, workload B, easy-first priority (0/1/1), full drain", GPU_SCALING / "priority" / "run-priority.json",
     "fp8-prio", GPU_SCALING / "priority" / "workload-B-easy-first.json", "Bef"),
)
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
    cases = [
        fullstack_case(title, FULLSTACK / f"{name}-report.json", EXAMPLES / policy) for title, name, policy in FULLSTACK_CASES
    ]
    title, report, policy = AUTOSCALING_CASE
    cases.append(fullstack_case(title, report, policy, settings=SimSettings(startup_s=AUTOSCALING_STARTUP_S)))
    cases += [
        engine_case(title, run, config, workload, EXAMPLES / "h200-7b.yaml", step)
        for title, run, config, workload, step in ENGINE_CASES
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
    text = markdown(validation_cases())
    (out / "validation.md").write_text(text)
    measured = speed() if with_speed else None
    if measured is not None:
        (out / "speed.json").write_text(json.dumps(measured, indent=1) + "\n")
    return text, measured
