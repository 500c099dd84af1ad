"""Autoscaling signals compared from fullstack runs: scale-up timing, replica-seconds, and policy variants."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from thinktier.cli.main import main
from thinktier.loadtest.bench.scaling_compare import TracePoint, compare, replica_seconds, scale_ups
from thinktier.policies.loader import load_policy

GPU_SCALING = Path(__file__).resolve().parents[2] / "loadtest" / "results" / "gpu-scaling" / "autoscaling"
POLICY = Path(__file__).resolve().parents[2] / "policies" / "examples" / "gpu-autoscaling.yaml"


def _points(rows: list[tuple[float, int, int, float]]) -> list[TracePoint]:
    return [TracePoint(t, routable, held, kv, 0.0) for t, routable, held, kv in rows]


def test_a_scale_up_runs_from_kv_pressure_through_the_start_to_routable() -> None:
    points = _points([
        (0, 1, 1, 0.2), (10, 1, 1, 0.75), (20, 1, 2, 0.9), (60, 1, 2, 1.0), (70, 2, 2, 0.5),
        (80, 2, 2, 0.6), (90, 2, 3, 0.8), (100, 3, 3, 0.5),
    ])
    ups = scale_ups(points, target_kv=0.7)
    assert [(u.pressure_s, u.asked_s, u.routable_s) for u in ups] == [(10, 20, 70), (90, 90, 100)]
    assert ups[0].pressure_to_routable_s == 60


def test_a_scale_up_without_kv_pressure_has_no_pressure_time() -> None:
    ups = scale_ups(_points([(0, 1, 1, 0.1), (5, 1, 2, 0.2), (9, 2, 2, 0.1)]), target_kv=0.7)
    assert ups[0].pressure_s is None and ups[0].pressure_to_routable_s is None


def test_replica_seconds_integrate_the_count_between_samples() -> None:
    assert replica_seconds([(0, 1), (10, 2), (15, 2), (20, 1)]) == 10 * 1 + 5 * 2 + 5 * 2


def test_the_recorded_gpu_runs_compare_the_two_signals() -> None:
    results = {r.name: r for r in compare(GPU_SCALING, "reasoning")}
    assert {r.signal for r in results.values()} == {"kv_and_stragglers", "ongoing_requests"}
    kv = results["kv"]
    assert kv.requests == 515 and kv.max_routable == 2
    assert kv.max_held == 3  # a third replica was started late in the burst and never served before the run ended
    assert kv.held_replica_s > kv.routable_replica_s
    assert 40 < kv.scale_ups[0].pressure_to_routable_s < 90


def test_fullstack_set_serves_a_changed_copy_and_refuses_unknown_configs(tmp_path: Path, capsys) -> None:
    args = ["bench", "fullstack", "--config", f"kv={POLICY}", "--config", f"ongoing={POLICY}",
            "--set", "ongoing:tiers.reasoning.autoscaling.signal=ongoing_requests", "--out", str(tmp_path),
            "--deadline", "1"]
    assert main(args) == 1  # no time is left to run them: both configs are skipped
    assert "no policy was run" in capsys.readouterr().out
    changed = load_policy(tmp_path / "ongoing-policy.yaml")
    assert changed.tiers["reasoning"].autoscaling.signal == "ongoing_requests"
    assert changed.tiers["reasoning"].replicas == load_policy(POLICY).tiers["reasoning"].replicas
    assert not (tmp_path / "kv-policy.yaml").exists()
    assert main(["bench", "fullstack", "--config", f"kv={POLICY}", "--set", "nope:routing.default_effort=low",
                 "--out", str(tmp_path)]) == 2
    assert "--set names no config ['nope']" in capsys.readouterr().err


def test_summarize_scaling_writes_the_comparison(tmp_path: Path) -> None:
    for f in GPU_SCALING.glob("*"):
        if f.suffix in (".json", ".jsonl"):
            shutil.copy(f, tmp_path / f.name)
    assert main(["bench", "fullstack", "--summarize", str(tmp_path), "--baseline", "ongoing", "--scaling",
                 "reasoning"]) == 0
    saved = json.loads((tmp_path / "autoscaling.json").read_text())
    assert [r["name"] for r in saved] == ["kv", "ongoing"]
    assert (tmp_path / "autoscaling.png").stat().st_size > 10_000
    table = (tmp_path / "autoscaling.md").read_text()
    assert "| kv | kv_and_stragglers | 515 | 19 | 146 |" in table  # SLO misses, then degraded requests
    assert table.index("easy TTFVT p99") < table.index("medium TTFVT p99") < table.index("hard TTFVT p99")


def test_gpu_workload_set_changes_the_priorities_it_records(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    assert main(["bench", "gpu", "workload", "--policy", str(POLICY.with_name("h200-7b.yaml")), "--set",
                 'routing.priority={"easy":0,"medium":1,"hard":1}', "--name", "B", "--rate", "2", "--duration", "10",
                 "--out", str(out)]) == 0
    requests = json.loads(out.read_text())["requests"]
    assert {r["priority"] for r in requests if r["difficulty"] == "hard"} == {1}
