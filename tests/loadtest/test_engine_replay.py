"""A recorded `thinktier bench gpu run` replayed through one simulated engine, and the serving overhead fitted on it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from thinktier.cli.main import main
from thinktier.loadtest.bench.gpu.gpu_configs import CONFIGS
from thinktier.loadtest.bench.gpu.gpu_workload import BenchRequest, Workload
from thinktier.loadtest.sim.engine_replay import replay_engine
from thinktier.loadtest.sim.sim_profile import HardwareProfile, profile_for
from thinktier.loadtest.sim.sim_validate import EngineRun, engine_case, fit_engine_overhead
from thinktier.policies.loader import load_policy, with_setting

POLICY = Path(__file__).resolve().parents[2] / "policies" / "examples" / "h200-7b.yaml"
KV_TOKENS = 40_000


def _workload() -> Workload:
    classes = ("easy", "easy", "medium", "hard")
    budgets = {"easy": 512, "medium": 1536, "hard": 4096}
    requests = tuple(
        BenchRequest(index=i, send_at_s=0.1 * i, difficulty=classes[i % 4], prompt_id=f"p{i}", text="What is 2 + 2? " * 8,  # type: ignore[arg-type]
                     thinking_tokens=budgets[classes[i % 4]], answer_tokens=64, priority=0 if classes[i % 4] == "easy" else 1)
        for i in range(80)
    )
    return Workload("W", 10.0, 0.5, 8.0, 1, "easy=0.5,medium=0.25,hard=0.25", requests)


def _recorded_run(tmp_path: Path, overhead_s_per_seq: float) -> EngineRun:
    """A run file in the bench's shape whose figures are the simulator's own at this overhead: the truth to recover."""
    workload = _workload()
    workload_path = tmp_path / "workload.json"
    workload_path.write_text(json.dumps(workload.to_json()))
    policy = load_policy(POLICY)
    tier = policy.routing.reasoning_tier
    profile = replace(profile_for(policy.tiers[tier]), overhead_s_per_seq=overhead_s_per_seq)
    sim = replay_engine(workload, policy, tier, profile, CONFIGS["fp8-prio"], 120.0, KV_TOKENS)
    met = sum(c["met_slo"] for c in sim.per_class.values())
    figures = {"output_tokens_per_s": sim.output_tokens_per_s, "goodput_rps": met / workload.duration_s,
               "per_class": sim.per_class}
    run = {"drain_s": 120.0, "results": [{"config": "fp8-prio", "kv_capacity_tokens": KV_TOKENS, "workloads": {"W": figures}}]}
    run_path = tmp_path / "run.json"
    run_path.write_text(json.dumps(run))
    return EngineRun(run_path, "fp8-prio", workload_path, POLICY, "W")


def test_the_fitted_serving_overhead_is_the_one_that_made_the_run(tmp_path: Path) -> None:
    run = _recorded_run(tmp_path, 30e-6)
    fitted = fit_engine_overhead(run)
    assert fitted == pytest.approx(30e-6, rel=0.1)
    case = engine_case("fitted", run, fitted)
    throughput = next(f for f in case.figures if f.name == "output tok/s")
    assert throughput.error is not None and abs(throughput.error) < 0.02


def test_a_heavier_engine_process_slows_the_replayed_run(tmp_path: Path) -> None:
    run = _recorded_run(tmp_path, 30e-6)
    light, heavy = run.replay(10e-6), run.replay(100e-6)
    assert heavy.output_tokens_per_s < light.output_tokens_per_s
    assert heavy.per_class["hard"]["e2e_s"]["p50"] > light.per_class["hard"]["e2e_s"]["p50"]


def test_plan_takes_the_serving_overhead_and_refuses_a_negative_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["plan", "--policy", str(POLICY), "--rate", "4", "--duration", "10", "--no-autoscale"]
    for us in ("5", "200"):
        assert main([*common, "--serving-overhead-us", us, "--out", str(tmp_path / us)]) == 0
    tps = {us: json.loads((tmp_path / us / "plan.json").read_text())["report"]["runs"][0]["tps"] for us in ("5", "200")}
    assert tps["200"] < tps["5"]
    capsys.readouterr()
    assert main([*common, "--serving-overhead-us", "-1", "--out", str(tmp_path / "bad")]) == 2
    assert "--serving-overhead-us: -1 is negative" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


RESULTS = Path(__file__).resolve().parents[2] / "loadtest" / "results"


def test_a_step_profile_file_carries_what_the_planner_needs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = RESULTS / "gpu-deadline" / "run-profile.json"
    bare, whole = tmp_path / "bare.json", tmp_path / "whole.json"
    step = ["bench", "gpu", "step-profile", str(run), "--config", "fp8-prio"]
    assert main([*step, "--out", str(bare)]) == 0
    with pytest.raises(ValueError, match="no 'geometry'"):
        HardwareProfile.load(bare)
    assert main([*step, "--geometry-from", str(bare), "--out", str(whole)]) == 2
    assert "no 'geometry' to take" in capsys.readouterr().err
    assert main([*step, "--geometry-from", str(RESULTS / "gpu" / "h200_step_profile.json"), "--device-memory-gib", "78.66",
                 "--out", str(whole)]) == 0
    profile = HardwareProfile.load(whole)
    tier = with_setting(load_policy(POLICY), "tiers.reasoning.engine.kv_cache_memory_gib", "2").tiers["reasoning"]
    assert profile.kv_tokens(tier) == 2 * 1024**3 // (2 * 28 * 4 * 128) and profile.device_memory_gib == 78.66
    assert profile.step_s(256, 6000) > profile.step_s(1, 512) > 0


def test_plan_refuses_a_step_profile_that_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--policy", str(POLICY), "--step-profile", str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 2
    assert "--step-profile: no such file" in capsys.readouterr().err


def test_simulate_writes_a_report_that_reads_like_a_gpu_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(_workload().to_json()))
    out = tmp_path / "sim.json"
    base = ["bench", "gpu", "simulate", "--policy", str(POLICY), "--workload", f"W={workload}", "--drain-s", "300",
            "--kv-cache-gib", "0.2"]
    assert main([*base, "--config", "fp8:W", "--config", "fp8-prio:W", "--serving-overhead-us", "15", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert "simulated: step profile h200_step_profile, serving overhead 15.0 us" in report["gpu"]
    fcfs, prio = (r["workloads"]["W"] for r in report["results"])
    assert fcfs["sent"] == prio["sent"] == 80 and fcfs["finished"] == 80 and 0 < fcfs["kv_occupancy_peak"] <= 1
    assert prio["per_class"]["easy"]["ttfvt_s"]["p99"] < fcfs["per_class"]["easy"]["ttfvt_s"]["p99"]
    assert main(["bench", "gpu", "table", str(out)]) == 0
    assert capsys.readouterr().out == printed.split("wrote ")[0]
    for bad, message in (("fp8-offload:W", "models no KV offload"), ("fp8:W,profile", "measures no step profile"),
                         ("fp8:X", "")):
        assert main([*base, "--config", bad, "--out", str(tmp_path / "bad.json")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "bad.json").exists()
