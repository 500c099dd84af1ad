"""The GPU benchmark's CPU-side parts: workload construction from the policy, configurations, summaries."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest

from thinktier.cli.main import build_parser
from thinktier.cli.main import main as thinktier_main
from thinktier.deployments.tier.engine import engine_env
from thinktier.loadtest.bench.gpu import gpu_bench, gpu_device
from thinktier.loadtest.bench.gpu.gpu_configs import CONFIGS, configured_tier, engine_overrides, parse_plan
from thinktier.loadtest.bench.gpu.gpu_results import RequestRecord, Sample, markdown_table, summarize
from thinktier.loadtest.bench.gpu.gpu_step_profile import fit_step_profile, step_profile_file
from thinktier.loadtest.bench.gpu.gpu_workload import CLASSES, Workload, build_workload
from thinktier.loadtest.workload import Mix, PromptPool
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import SLO
from thinktier.training.data.problems import Problem

POLICY = Path(__file__).resolve().parents[2] / "policies" / "examples" / "h200-7b.yaml"
CPU_POLICY = POLICY.with_name("compare-tiered.yaml")


@pytest.fixture(scope="module")
def policy():
    return load_policy(POLICY)


@pytest.fixture(scope="module")
def pool() -> PromptPool:
    problems = [
        Problem(f"{source}:{i}", f"{source} problem {i}", klass, source, "en")  # type: ignore[arg-type]
        for source, klass in (("GSM8K", "easy"), ("MATH500", "medium"), ("AIME2024", "hard"))
        for i in range(5)
    ]
    return PromptPool(problems, [])


def test_workload_takes_budgets_and_priorities_from_the_policy(policy, pool) -> None:
    workload = build_workload(policy, pool, "A", Mix.parse("easy=0.6,medium=0.25,hard=0.15"), 4.0, 0.5, 60, seed=3)
    tier = policy.tiers["reasoning"]
    effort = {"easy": "low", "medium": "medium", "hard": "high"}
    assert {r.difficulty for r in workload.requests} == {"easy", "medium", "hard"}
    for r in workload.requests:
        budget = tier.budgets[effort[r.difficulty]]
        assert (r.thinking_tokens, r.answer_tokens) == (budget.thinking_tokens, budget.answer_tokens)
        assert r.priority == policy.routing.priority[r.difficulty]
    sends = [r.send_at_s for r in workload.requests]
    assert sends == sorted(sends) and sends[0] == 0 and sends[-1] < 60
    assert 150 < len(sends) < 330  # 4 requests/s for 60 s


def test_workload_is_seeded_and_survives_json(policy, pool, tmp_path) -> None:
    mix = Mix.parse("easy=1,hard=1")
    first = build_workload(policy, pool, "A", mix, 2.0, 1.0, 20, seed=5)
    assert first == build_workload(policy, pool, "A", mix, 2.0, 1.0, 20, seed=5)
    assert first != build_workload(policy, pool, "A", mix, 2.0, 1.0, 20, seed=6)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(first.to_json()))
    assert Workload.from_json(json.loads(path.read_text())) == first


def test_workload_refuses_chat_prompts(policy, pool) -> None:
    with pytest.raises(ValueError, match="drop chat"):
        build_workload(policy, pool, "A", Mix.parse("easy=1,chat=1"), 1.0, 1.0, 10, seed=1)


def test_configured_tier_changes_only_what_the_configuration_names(policy) -> None:
    base = policy.tiers["reasoning"]
    tier = configured_tier(base, CONFIGS["fp8-offload-decode-prio"], "/tmp/r1q7b", 2.0, 0.3)
    assert tier.model == "/tmp/r1q7b"
    assert tier.engine.kv_cache_dtype == "fp8" and tier.engine.scheduling_policy == "priority"
    assert tier.engine.kv_offloading.enabled and tier.engine.kv_cache_memory_gib == 2.0
    assert tier.budgets == base.budgets and tier.engine.max_num_seqs == base.engine.max_num_seqs
    bf16 = configured_tier(base, CONFIGS["bf16"], "/m", None, 0.9)
    assert bf16.engine.kv_cache_dtype == "bfloat16" and bf16.engine.scheduling_policy == "fcfs"
    assert not bf16.engine.kv_offloading.enabled and bf16.engine.kv_cache_memory_gib is None
    assert bf16.engine.thinking_budget_processor == "thinktier"
    assert configured_tier(base, CONFIGS["fp8-vllm-budget"], "/m", None, 0.9).engine.thinking_budget_processor == "vllm"
    preempt = configured_tier(base, CONFIGS["fp8-preempt-offload-prio"], "/m", 2.0, 0.3)
    assert (preempt.engine.kv_offloading.mode, preempt.engine.kv_offloading.size_gib) == ("preempted", 16)
    assert preempt.pool.memory_gib >= 16 + 2  # room for the host copy beside the engine process
    assert configured_tier(base, CONFIGS["fp8-offload-prio"], "/m", 2.0, 0.3).engine.kv_offloading.mode == "native"


def test_the_sync_pair_turns_async_scheduling_off_and_nothing_else() -> None:
    """Native offload is measured beside its own baseline with async scheduling off; the other configs leave it to vLLM."""
    assert engine_overrides(CONFIGS["fp8-offload-decode-prio-sync"], "dummy")["async_scheduling"] is False
    assert engine_overrides(CONFIGS["fp8-prio-sync"], "dummy") == {"load_format": "dummy", "async_scheduling": False}
    assert "async_scheduling" not in engine_overrides(CONFIGS["fp8-offload-decode-prio"], "dummy")


def test_a_cpu_tier_runs_as_its_policy_says_with_its_replica_environment(monkeypatch) -> None:
    """auto-prio keeps a CPU tier's KV dtype and size; the engine starts with the Serve replica's environment."""
    policy = load_policy(CPU_POLICY)
    base = policy.tiers["reasoning"]
    tier = configured_tier(base, CONFIGS["auto-prio"], base.model, base.engine.kv_cache_memory_gib, 0.9)
    assert tier.engine == base.engine
    for key in engine_env(tier):
        monkeypatch.setenv(key, "unset")  # restored after the test
    seen: dict[str, str] = {}

    class Engine:  # stands in for vLLM: records the environment it starts in
        def __init__(self, *args: object) -> None:
            seen.update(os.environ)
            raise RuntimeError("no engine here")

    monkeypatch.setattr("thinktier.deployments.tier.engine.TierEngine", Engine)
    settings = gpu_bench.RunSettings(base.model, "auto", 0.03, 0.9, False, 0, [1], [128], 1)
    with pytest.raises(RuntimeError, match="no engine here"):
        asyncio.run(gpu_bench.run_config("auto-prio", policy, settings, {}, ["profile"], lambda result: None))
    assert seen["VLLM_CPU_OMP_THREADS_BIND"] == base.engine.cpu_threads == "0"
    assert seen["VLLM_TARGET_DEVICE"] == "cpu"


def _sample(t: float, kv: float, preempt: int, tokens: int, stored: float = 0.0) -> Sample:
    return Sample(t, kv, 0, 0, preempt, tokens, stored, 0.0)


def test_summary_counts_goodput_under_the_slos_and_engine_counter_deltas() -> None:
    slos = {"easy": SLO(ttfvt_s=1, e2e_s=2), "medium": SLO(ttfvt_s=5, e2e_s=10), "hard": SLO(ttfvt_s=10, e2e_s=20)}
    records = [
        RequestRecord(0, "easy", 0.0, ttft_s=0.1, ttfvt_s=0.5, e2e_s=1.5),  # meets
        RequestRecord(1, "easy", 0.1, ttft_s=0.1, ttfvt_s=1.5, e2e_s=1.8),  # TTFVT too late
        RequestRecord(2, "hard", 0.2, ttft_s=0.3, ttfvt_s=8.0, e2e_s=19.0, preemptions=3),  # meets
        RequestRecord(3, "hard", 0.3, ttft_s=0.3),  # never finished
    ]
    records[1].preemptions = 1
    records[0].reasoning_tokens, records[1].reasoning_tokens = 140, 10  # 100 tok/s after the first token; 1 was preempted
    samples = [_sample(0, 0.0, 5, 1000), _sample(1, 1.0, 7, 3000, stored=2**30), _sample(2, 0.5, 9, 5000, stored=2**31)]
    samples[-1].resume_lookups_total, samples[-1].resume_lookup_tokens_total, samples[-1].resume_prefix_hits_total = 4, 900, 500
    summary = summarize(records, samples, slos, wall_s=20.0, duration_s=10.0)
    # four resumes looked up 900 tokens and found 500 on the GPU: 100 tokens each to recompute (or load)
    assert summary["resume_lookups"] == 4 and summary["resume_gpu_misses"] == 400
    result = {"config": "c", "kv_capacity_tokens": 1, "workloads": {"B": summary}}
    assert markdown_table([{"results": [result]}]).rstrip().endswith("| 100 |")
    assert summary["met_slo"] == 2 and summary["goodput_rps"] == pytest.approx(0.2)
    assert summary["finished"] == 3 and summary["per_class"]["hard"]["finished"] == 1
    assert summary["output_tokens"] == 4000 and summary["output_tokens_per_s"] == pytest.approx(200)
    assert summary["preemptions"] == 4 and summary["offload_store_gib"] == pytest.approx(2.0)
    # which class the engine evicted: from each finished request's own count
    assert [(summary["per_class"][k]["preemptions"], summary["per_class"][k]["preempted_requests"]) for k in CLASSES] == [
        (1, 1), (0, 0), (3, 1)
    ]
    assert "| 4 | 1 / 0 / 3 |" in markdown_table([{"results": [result]}])
    # the decode rate of easy requests the engine never preempted, beside their latency
    assert "| 100 | - / - |" in markdown_table([{"results": [result]}])
    assert summary["kv_occupancy_peak"] == 1.0 and summary["kv_occupancy_mean"] == pytest.approx(0.5)
    assert summary["per_class"]["easy"]["ttfvt_s"]["p50"] == pytest.approx(1.0)
    assert summary["per_class"]["medium"]["sent"] == 0 and summary["per_class"]["medium"]["e2e_s"]["p99"] is None


def test_step_profile_fit_recovers_a_linear_cost_model() -> None:
    points = [
        {"batch_size": b, "context_tokens": c, "step_s": 0.004 + 2e-5 * b + 3e-9 * b * c}
        for b in (1, 8, 64, 256)
        for c in (512, 2048, 8000)
    ]
    fit = fit_step_profile(points)
    assert fit["a_s"] == pytest.approx(0.004, rel=1e-6)
    assert fit["b_s_per_seq"] == pytest.approx(2e-5, rel=1e-6)
    assert fit["c_s_per_seq_token"] == pytest.approx(3e-9, rel=1e-6)


def test_plan_names_configurations_and_steps(policy, pool) -> None:
    workloads = {"A": build_workload(policy, pool, "A", Mix.parse("easy=1"), 1.0, 1.0, 5, seed=1)}
    assert parse_plan(["bf16:A", "fp8:A,profile"], workloads) == [("bf16", ["A"]), ("fp8", ["A", "profile"])]
    with pytest.raises(ValueError, match="unknown configuration 'fp4'"):
        parse_plan(["fp4:A"], workloads)
    with pytest.raises(ValueError, match="workload names"):
        parse_plan(["fp8:B"], workloads)


def test_help_explains_both_steps(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "gpu", "--help"])
    text = capsys.readouterr().out
    assert "usage: thinktier bench gpu" in text
    assert "workload" in text and "run" in text and "GPU" in text and "step-profile" in text


def test_run_command_records_how_to_repeat_it(policy, pool, tmp_path, monkeypatch) -> None:
    """The report names the `thinktier bench gpu run` command that made it; configurations run in the given order."""
    workload = tmp_path / "workload-A.json"
    workload.write_text(json.dumps(build_workload(policy, pool, "A", Mix.parse("easy=1"), 1.0, 1.0, 5, seed=1).to_json()))
    ran: list[tuple[str, list[str], gpu_bench.RunSettings]] = []

    async def run_config(name, policy, settings, workloads, steps, save):  # the GPU part
        ran.append((name, steps, settings))
        return {"config": name, "workloads": {}}

    monkeypatch.setattr(gpu_bench, "run_config", run_config)
    out = tmp_path / "run.json"
    argv = ["bench", "gpu", "run", "--policy", str(POLICY), "--model", "/tmp/r1q7b", "--workload", f"A={workload}",
            "--config", "bf16:A", "--config", "fp8:A,profile", "--profile-batches", "1,8", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["thinktier", *argv])
    assert thinktier_main(argv) == 0

    report = json.loads(out.read_text())
    assert report["command"] == "thinktier " + " ".join(argv)
    assert [r["config"] for r in report["results"]] == ["bf16", "fp8"] and report["workloads"]["A"]["requests"] >= 1
    assert [(name, steps) for name, steps, _ in ran] == [("bf16", ["A"]), ("fp8", ["A", "profile"])]
    assert ran[0][2].profile_batches == [1, 8] and ran[0][2].kv_cache_gib == 2.0


def test_run_on_a_cpu_tier_names_the_cpu(tmp_path, monkeypatch) -> None:
    async def run_config(name, policy, settings, workloads, steps, save):
        return {"config": name, "workloads": {}}

    monkeypatch.setattr(gpu_bench, "run_config", run_config)
    monkeypatch.setattr(gpu_device, "cpu_name", lambda: "Some CPU")
    settings = gpu_bench.RunSettings("builtin:tiny-random", "auto", 0.03, 0.9, False, 0, [1], [128], 1)
    report = gpu_bench.run(str(CPU_POLICY), {}, [("auto-prio", ["profile"])], settings, tmp_path / "r.json", "cmd")
    assert report["gpu"] == "Some CPU"


def test_run_command_names_a_bad_plan(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    argv = ["bench", "gpu", "run", "--policy", str(POLICY), "--model", "/m", "--config", "fp4:A", "--out", str(out)]
    assert thinktier_main(argv) == 2
    assert "unknown configuration 'fp4'" in capsys.readouterr().err and not out.exists()


def test_table_has_a_row_per_configuration_and_workload() -> None:
    slos = {k: SLO(ttfvt_s=10, e2e_s=20) for k in ("easy", "medium", "hard")}
    records = [RequestRecord(0, "easy", 0.0, ttft_s=0.1, ttfvt_s=0.5, e2e_s=1.5)]
    summary = summarize(records, [_sample(0, 0.1, 0, 0), _sample(1, 0.2, 0, 768)], slos, wall_s=2.0, duration_s=1.0)
    report = {"results": [{"config": "fp8", "kv_capacity_tokens": 74_880, "workloads": {"A": summary, "B": summary}}]}
    rows = markdown_table([report]).splitlines()
    assert len(rows) == 4 and rows[2].startswith("| fp8 | A | 74,880 | 384 | 1.00 | 1/1 | 0.5 / 0.5 |")


def test_step_profile_file_takes_the_named_configuration() -> None:
    points = [{"batch_size": b, "context_tokens": c, "step_s": 0.005 + 1e-5 * b * c / 512} for b in (1, 64) for c in (512, 6000)]
    result = {
        "config": "fp8",
        "engine": {"kv_cache_dtype": "fp8", "enforce_eager": False, "max_num_seqs": 256, "dtype": "auto"},
        "step_profile": {"points": points, "fit": fit_step_profile(points)},
    }
    report = {
        "command": "thinktier bench gpu run ...",
        "gpu": "NVIDIA H200",
        "model": "/tmp/r1q7b",
        "load_format": "dummy",
        "results": [result],
    }
    data = step_profile_file(report, "fp8")
    assert data["model"] == "/tmp/r1q7b, load_format dummy, dtype auto" and data["gpu"] == "NVIDIA H200"
    assert data["columns"] == ["batch_size", "context_tokens", "step_s"] and data["points"][1] == [1, 6000, points[1]["step_s"]]
    assert data["kv_cache_dtype"] == "fp8" and data["cuda_graphs"] and "formula" in data["fit"]
    with pytest.raises(ValueError, match="no step profile for configuration 'bf16'"):
        step_profile_file(report, "bf16")


def test_the_offload_script_runs_configurations_that_exist() -> None:
    """scripts/gpu_offload.sh is run on the GPU machine, where a wrong name costs a device call."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "scripts" / "gpu_offload.sh").read_text()
    parts = dict(re.findall(r"^  (\w)\) (.*) ;;$", text, re.M))
    assert set(parts) == {"a", "b", "c", "d", "e", "f"}
    names = [name for args in parts.values() for name in re.findall(r"--config ([\w-]+):", args)]
    declared = set(re.findall(r'--workload "([\w.-]+)=\$\w+"', text))
    specs = [spec for args in parts.values() for spec in re.findall(r"--config [\w-]+:([\w.,-]+)", args)]
    steps = {step for spec in specs for step in spec.split(",")}
    assert steps and steps <= declared, (steps, declared)
    assert names and all(name in CONFIGS for name in names), names
    assert "fp8-preempt-offload-prio" in names and "fp8-offload-decode-prio-sync" in names
    files = re.findall(r"^\w+=(loadtest/results/\S+\.json)$", text, re.M)
    assert len(files) == 2 and all((root / f).exists() for f in files), files

