"""The Helm chart's lint and values: helm lint and chart-testing's own checks, the values schema refusing bad
values, and the generated files (the block of values.yaml, helm/generated/, values.schema.json) current with the
policies, as their `thinktier helm` commands write them."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import helm_python
import jsonschema
import pytest
import yaml

from tests.helm_chart import CHART, DEFAULT, GENERATED, PRODUCTION, ROOT, HelmFailed, Render, merged_values
from thinktier.cli.main import main as thinktier_main
from thinktier.cluster.helm_values import (
    CHART_VALUES,
    VALUES_SCHEMA,
    helm_values,
    render_chart_defaults,
    render_helm_values,
    render_values_schema,
    values_schema_properties,
)
from thinktier.policies.loader import load_policy


@pytest.mark.parametrize("files", [(), DEFAULT, PRODUCTION], ids=["chart-defaults", "default", "production"])
def test_helm_lint_is_clean(files: tuple[Path, ...]) -> None:
    report = helm_python.lint(CHART, merged_values(*files), strict=True, namespace="llm")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert problems == []


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_helm_lint_passes_on_the_charts_own_defaults(helm3: Path, strict: bool) -> None:
    """What chart-testing's `ct lint` runs on a chart without ci/ values files: `helm lint CHART`, no values."""
    done = subprocess.run(
        [str(helm3), "lint", str(CHART), *(["--strict"] if strict else [])], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    assert "[ERROR]" not in done.stdout and "[WARNING]" not in done.stdout


def test_chart_yaml_and_values_pass_chart_testings_own_checks() -> None:
    """Besides helm lint, `ct lint` checks Chart.yaml against its schema (yamale) and both files with yamllint, using
    its default configuration (tests/fixtures/chart-testing/)."""
    ct = ROOT / "tests/fixtures/chart-testing"
    bin_dir = Path(sys.executable).parent
    linted = subprocess.run(
        [
            str(bin_dir / "yamllint"),
            "--strict",
            "-c",
            str(ct / "lintconf.yaml"),
            str(CHART / "Chart.yaml"),
            str(CHART / "values.yaml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
    schema = subprocess.run(
        [str(bin_dir / "yamale"), "-s", str(ct / "chart_schema.yaml"), str(CHART / "Chart.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert schema.returncode == 0, schema.stdout + schema.stderr


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("service.type=Public",), "service.type must be one of"),
        (("servePort=70000",), "servePort: Must be less than or equal to 65535"),
        (("tiers[0].gpus=-1",), "tiers.0.gpus: Must be greater than or equal to 0"),
        (("tiers[0].accelerator=tpu",), "tiers.0.accelerator must be one of"),
        (("tiers[0].maxReplicas=0",), "tiers.0.maxReplicas: Must be greater than or equal to 1"),
        (("autoscaler.upscalingMode=Fast",), "autoscaler.upscalingMode must be one of"),
        (("workers.sharedMemoryGibibytes=8",), "Additional property sharedMemoryGibibytes is not allowed"),
    ],
)
def test_schema_rejects_bad_values(render: Render, sets: tuple[str, ...], message: str) -> None:
    with pytest.raises(HelmFailed, match=re.escape(message)):
        render(*DEFAULT, sets=sets)


def test_checked_in_chart_defaults_are_the_embedded_default_policys_values() -> None:
    committed = CHART_VALUES.read_text()
    assert render_chart_defaults(committed) == committed, (
        f"the generated block of {CHART_VALUES.relative_to(ROOT)} is stale; run: thinktier helm defaults"
    )
    assert thinktier_main(["helm", "defaults", "--check"]) == 0


def test_helm_defaults_command_rewrites_only_the_generated_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    committed = CHART_VALUES.read_text()
    stale = tmp_path / "values.yaml"
    stale.write_text(committed.replace("servePort: 8000\n", "servePort: 8001\n", 1))
    assert thinktier_main(["helm", "defaults", "--values", str(stale), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert thinktier_main(["helm", "defaults", "--values", str(stale)]) == 0
    assert stale.read_text() == committed


@pytest.mark.parametrize(("generated", "policy_file"), list(GENERATED.items()), ids=lambda v: str(v))
def test_checked_in_generated_values_are_up_to_date(generated: Path, policy_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert generated.read_text() == render_helm_values(policy_file), (
        f"{generated} is stale; run: thinktier helm values --policy {policy_file} --output {generated.relative_to(ROOT)}"
    )
    assert thinktier_main(["helm", "values", "--policy", policy_file, "--output", str(generated), "--check"]) == 0


def test_helm_values_cli_refuses_an_invalid_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "policies/default.yaml").read_text().replace("max_num_seqs: 16", "max_num_seqs: 0", 1))
    assert thinktier_main(["helm", "values", "--policy", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "max_num_seqs" in err and str(bad) in err


def test_helm_values_carry_shared_capacity_and_refuse_gpu_shares_a_pod_does_not_get(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = load_policy(ROOT / "policies/examples/gpu-fullstack-tiered.yaml").model_dump(mode="json")
    for name in ("reasoning", "chat"):
        data["tiers"][name]["replicas"] = {"min": 1, "max": 4}
    data["shared_capacity"] = [{"tiers": ["reasoning", "chat"], "total": 2}]
    shared = tmp_path / "shared.yaml"
    shared.write_text(yaml.safe_dump(data))
    assert thinktier_main(["helm", "values", "--policy", str(shared)]) == 2
    assert "shared_capacity.0: tier 'reasoning' asks for pool.gpu_fraction 0.75" in capsys.readouterr().err

    for name in ("reasoning", "chat"):
        data["tiers"][name]["pool"]["gpu_fraction"] = 1
        data["tiers"][name]["engine"]["gpu_memory_utilization"] = 0.9
    shared.write_text(yaml.safe_dump(data))
    out = tmp_path / "values.yaml"
    assert thinktier_main(["helm", "values", "--policy", str(shared), "--output", str(out)]) == 0
    serve_config = yaml.safe_load(yaml.safe_load(out.read_text())["serveConfigV2"])
    policy = serve_config["applications"][0]["autoscaling_policy"]
    assert policy["policy_function"] == "thinktier.cluster.shared_capacity:SharedCapacityPolicy"
    assert policy["policy_kwargs"]["pools"][0]["total"] == 2


def test_checked_in_values_schema_is_up_to_date() -> None:
    committed = VALUES_SCHEMA.read_text()
    assert render_values_schema(committed) == committed, (
        f"the generated part of {VALUES_SCHEMA.relative_to(ROOT)} is stale; run: thinktier helm schema"
    )
    assert thinktier_main(["helm", "schema", "--check"]) == 0


def test_values_schema_generated_part_covers_every_generated_value_and_follows_the_policy() -> None:
    """Every value `thinktier helm values` writes has a generated schema, with the policy field's bounds and help."""
    for generated, policy_file in GENERATED.items():
        values = helm_values(load_policy(ROOT / policy_file), (ROOT / policy_file).read_text())
        assert values_schema_properties().keys() == values.keys()
        jsonschema.validate(yaml.safe_load(generated.read_text()), json.loads(VALUES_SCHEMA.read_text()))
    group = values_schema_properties()["tiers"]["items"]["properties"]
    assert group["accelerator"]["enum"] == ["cpu", "gpu"]
    assert group["maxReplicas"]["description"].startswith("Most replicas the autoscaler may start.")


def test_helm_schema_command_rewrites_only_the_generated_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    committed = json.loads(VALUES_SCHEMA.read_text())
    stale = copy.deepcopy(committed)
    stale["properties"]["tiers"] = {"type": "object"}
    path = tmp_path / "values.schema.json"
    path.write_text(json.dumps(stale, indent=2) + "\n")
    assert thinktier_main(["helm", "schema", "--schema", str(path), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert thinktier_main(["helm", "schema", "--schema", str(path)]) == 0
    assert json.loads(path.read_text()) == committed
