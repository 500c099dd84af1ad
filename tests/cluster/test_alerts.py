"""The alerting rules generated from a policy, checked by Prometheus's own promtool: every policy's rules pass
`promtool check rules`, and `promtool test rules` fires each alert on synthetic series (tests/fixtures/alerts/)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.live import merged
from tests.system_tools import system_tool
from thinktier.cli.main import main as thinktier_main
from thinktier.cluster.alerts import alert_rules
from thinktier.deployments.request.metrics import LATENCY_BUCKETS
from thinktier.policies.loader import DEFAULT_POLICY, load_policy

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "alerts"
POLICIES = [DEFAULT_POLICY, *sorted((ROOT / "policies" / "examples").glob("*.yaml"))]
EVERY_ALERT = {
    "ThinktierTTFVTSLOBreached",
    "ThinktierE2ESLOBreached",
    "ThinktierKVCachePinned",
    "ThinktierStragglersAboveLimit",
    "ThinktierRequestsShed",
    "ThinktierPolicyReloadFailed",
    "ThinktierReplicasBelowMinimum",
    "ThinktierEngineRestarted",
}


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([system_tool("promtool"), *map(str, args)], capture_output=True, text=True, check=False)


def _rules(policy: Path, tmp_path: Path) -> Path:
    out = tmp_path / "rules.yaml"
    assert thinktier_main(["helm", "alerts", "--policy", str(policy), "--output", str(out)]) == 0
    return out


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.stem)
def test_every_policys_rules_pass_promtool_check(policy: Path, tmp_path: Path) -> None:
    checked = _promtool("check", "rules", _rules(policy, tmp_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def _edited(policy: Path, edits: dict[str, Any], tmp_path: Path) -> Path:
    """`policy` with `edits` merged in, as a file in `tmp_path`."""
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(merged(yaml.safe_load(policy.read_text()), edits)))
    return path


@pytest.mark.parametrize(
    ("policy", "edits", "unit_tests"),
    [
        (DEFAULT_POLICY, {}, FIXTURES / "default-policy.test.yaml"),
        (ROOT / "policies/examples/production-h100.yaml", {}, FIXTURES / "production-h100.test.yaml"),
        (DEFAULT_POLICY, {"slos": {"hard": {"e2e_s": 1800}}, "server": {"tier_timeout_s": 1800}},
         FIXTURES / "past-largest-bucket.test.yaml"),
    ],
    ids=["default", "production-h100", "past-largest-bucket"],
)
def test_alerts_fire_on_synthetic_series(policy: Path, edits: dict[str, Any], unit_tests: Path, tmp_path: Path) -> None:
    _rules(_edited(policy, edits, tmp_path), tmp_path)  # the unit tests name rules.yaml beside them
    shutil.copy(unit_tests, tmp_path)
    tested = _promtool("test", "rules", tmp_path / unit_tests.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_default_policys_unit_tests_fire_every_alert() -> None:
    tests = yaml.safe_load((FIXTURES / "default-policy.test.yaml").read_text())["tests"]
    fired = {case["alertname"] for group in tests for case in group["alert_rule_test"] if case["exp_alerts"]}
    generated = {rule["alert"] for group in alert_rules(load_policy(DEFAULT_POLICY)) for rule in group["rules"]}
    assert fired == generated == EVERY_ALERT


def _exprs(edits: dict[str, Any], tmp_path: Path) -> dict[str, dict[str, str]]:
    """The alert expressions of the default policy with `edits`, by alert name and then by what each rule is for: its
    tier and difficulty class ("chat/easy"), its tier, or its deployment."""
    exprs: dict[str, dict[str, str]] = {}
    for group in alert_rules(load_policy(_edited(DEFAULT_POLICY, edits, tmp_path))):
        for rule in group["rules"]:
            labels = rule["labels"]
            key = "/".join(labels[name] for name in ("tier", "difficulty", "deployment") if name in labels)
            exprs.setdefault(rule["alert"], {})[key] = rule["expr"]
    return exprs


def test_thresholds_come_from_the_policy(tmp_path: Path) -> None:
    exprs = _exprs(
        {
            "slos": {"easy": {"ttfvt_s": 3.5, "e2e_s": 12}, "hard": {"ttfvt_s": 90, "e2e_s": 240}},
            "tiers": {"reasoning": {"replicas": {"min": 2, "max": 3}, "autoscaling": {"max_stragglers_per_replica": 5}}},
            "degradation": {"saturated_kv_occupancy": 0.9},
        },
        tmp_path,
    )
    # Each class is held to its own objectives on every tier (medium keeps the default policy's).
    ttfvt, e2e = exprs["ThinktierTTFVTSLOBreached"], exprs["ThinktierE2ESLOBreached"]
    assert sorted(ttfvt) == sorted(e2e) == [f"{tier}/{c}" for tier in ("chat", "reasoning") for c in ("easy", "hard", "medium")]
    for tier in ("chat", "reasoning"):
        assert ttfvt[f"{tier}/easy"].endswith("> 3.5") and e2e[f"{tier}/easy"].endswith("> 12")
        assert ttfvt[f"{tier}/medium"].endswith("> 20") and e2e[f"{tier}/medium"].endswith("> 60")
        assert ttfvt[f"{tier}/hard"].endswith("> 90") and e2e[f"{tier}/hard"].endswith("> 240")
    assert '{tier="chat", difficulty="hard"}' in e2e["chat/hard"]
    stragglers = exprs["ThinktierStragglersAboveLimit"]
    assert stragglers["reasoning"].endswith("> 5") and stragglers["chat"].endswith("> 2")
    assert exprs["ThinktierKVCachePinned"] == {"": "min by (namespace, tier) (thinktier_kv_cache_occupancy_ratio) >= 0.9"}
    floors = exprs["ThinktierReplicasBelowMinimum"]
    assert "< 2 or absent" in floors["tier-reasoning"] and "< 1 or absent" in floors["tier-chat"]


def test_the_straggler_alert_says_what_the_tiers_own_scaling_signal_does_about_stragglers(tmp_path: Path) -> None:
    edits = {"tiers": {"reasoning": {"autoscaling": {"signal": "kv_and_stragglers"}}}}
    descriptions = {
        rule["labels"]["tier"]: rule["annotations"]["description"]
        for group in alert_rules(load_policy(_edited(DEFAULT_POLICY, edits, tmp_path)))
        for rule in group["rules"] if rule["alert"] == "ThinktierStragglersAboveLimit"
    }
    assert "the autoscaler should have added replicas" in descriptions["reasoning"]
    assert "scales on ongoing requests (8 per replica), not on stragglers" in descriptions["chat"]
    assert "autoscaler should have added" not in descriptions["chat"]


def test_an_objective_the_histogram_cannot_resolve_is_held_at_its_largest_bucket(tmp_path: Path) -> None:
    top = LATENCY_BUCKETS[-1]  # the quantile saturates there: "> top" would never fire
    e2e = _exprs({"slos": {"hard": {"e2e_s": top}}, "server": {"tier_timeout_s": top}}, tmp_path)["ThinktierE2ESLOBreached"]
    assert e2e["reasoning/hard"].endswith(f">= {top:g}") and e2e["reasoning/medium"].endswith("> 60")


def test_a_tier_that_may_scale_to_zero_has_no_replica_floor(tmp_path: Path) -> None:
    floors = _exprs({"tiers": {"reasoning": {"replicas": {"min": 0, "max": 1}}}}, tmp_path)["ThinktierReplicasBelowMinimum"]
    assert sorted(floors) == ["Ingress", "tier-chat"]


def test_every_alert_has_a_runbook_section_in_the_chart_readme() -> None:
    readme = (ROOT / "helm" / "thinktier" / "README.md").read_text()
    sections = {line.removeprefix("#### ").strip() for line in readme.splitlines() if line.startswith("#### ")}
    for group in alert_rules(load_policy(ROOT / "policies/examples/production-h100.yaml")):
        for rule in group["rules"]:
            path, anchor = rule["annotations"]["runbook"].split("#")
            assert (ROOT / path).resolve() == ROOT / "helm" / "thinktier" / "README.md"
            assert rule["alert"] in sections, f"the chart README has no '#### {rule['alert']}' runbook section"
            assert anchor == rule["alert"].lower()  # GitHub's anchor of that heading
