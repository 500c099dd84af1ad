"""The alerting rules generated from a policy, checked by Prometheus's own promtool: every policy's rules pass
`promtool check rules`, and `promtool test rules` fires each alert on synthetic series (tests/fixtures/alerts/)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.main import main as thinktier_main
from cluster.alerts import alert_rules
from policies.loader import DEFAULT_POLICY, load_policy
from tests.live import merged
from tests.system_tools import system_tool

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.mark.parametrize(
    ("policy", "unit_tests"),
    [
        (DEFAULT_POLICY, FIXTURES / "default-policy.test.yaml"),
        (ROOT / "policies/examples/production-h100.yaml", FIXTURES / "production-h100.test.yaml"),
    ],
    ids=["default", "production-h100"],
)
def test_alerts_fire_on_synthetic_series(policy: Path, unit_tests: Path, tmp_path: Path) -> None:
    _rules(policy, tmp_path)  # the unit tests name rules.yaml beside them
    shutil.copy(unit_tests, tmp_path)
    tested = _promtool("test", "rules", tmp_path / unit_tests.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_default_policys_unit_tests_fire_every_alert() -> None:
    tests = yaml.safe_load((FIXTURES / "default-policy.test.yaml").read_text())["tests"]
    fired = {case["alertname"] for group in tests for case in group["alert_rule_test"] if case["exp_alerts"]}
    generated = {rule["alert"] for group in alert_rules(load_policy(DEFAULT_POLICY)) for rule in group["rules"]}
    assert fired == generated == EVERY_ALERT


def _exprs(edits: dict[str, Any], tmp_path: Path) -> dict[str, dict[str, str]]:
    """The alert expressions of the default policy with `edits`, by alert name and then by the tier or deployment
    each rule is for."""
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(merged(yaml.safe_load(DEFAULT_POLICY.read_text()), edits)))
    exprs: dict[str, dict[str, str]] = {}
    for group in alert_rules(load_policy(path)):
        for rule in group["rules"]:
            labels = rule["labels"]
            exprs.setdefault(rule["alert"], {})[labels.get("tier") or labels.get("deployment", "")] = rule["expr"]
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
    # The chat tier is held to the easy class, the reasoning tier to the loosest class it serves (hard).
    ttfvt, e2e = exprs["ThinktierTTFVTSLOBreached"], exprs["ThinktierE2ESLOBreached"]
    assert ttfvt["chat"].endswith("> 3.5") and ttfvt["reasoning"].endswith("> 90")
    assert e2e["chat"].endswith("> 12") and e2e["reasoning"].endswith("> 240")
    stragglers = exprs["ThinktierStragglersAboveLimit"]
    assert stragglers["reasoning"].endswith("> 5") and stragglers["chat"].endswith("> 2")
    assert exprs["ThinktierKVCachePinned"] == {"": "min by (namespace, tier) (thinktier_kv_cache_occupancy_ratio) >= 0.9"}
    floors = exprs["ThinktierReplicasBelowMinimum"]
    assert "< 2 or absent" in floors["tier-reasoning"] and "< 1 or absent" in floors["tier-chat"]


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
