"""`thinktier helm values|alerts|defaults|schema`: the Helm values that come from a policy, its alerting rules, the
chart's own defaults (the embedded default policy's values) and the part of the chart's values schema that describes
them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thinktier.policies.loader import PolicyError

# thinktier.cluster.helm_values imports the Serve application (and so Ray): each command imports it when it runs, so
# that building the CLI's parser needs no Ray (cli/main.py).


def register(subparsers: argparse._SubParsersAction) -> None:
    helm = subparsers.add_parser(
        "helm",
        help="Helm chart helpers.",
        description="Helpers for the Helm chart in helm/thinktier.",
    )
    commands = helm.add_subparsers(title="helm commands", metavar="COMMAND", required=True)
    values = commands.add_parser(
        "values",
        help="Write the chart values derived from a policy.",
        description=(
            "Validate a policy and write the Helm values derived from it: the policy text for the ConfigMap, "
            "the RayService serveConfigV2, one Ray worker group per tier (node pool, GPUs, CPUs, memory, "
            "min/max replicas) and the alert rules. Pass the output to helm before your own values: "
            "helm upgrade --install thinktier helm/thinktier -f generated.yaml -f my-values.yaml"
        ),
    )
    values.add_argument("--policy", required=True, type=Path, help="Policy YAML file to derive the values from.")
    values.add_argument("--output", "-o", type=Path, help="Write to this file instead of standard output.")
    values.add_argument(
        "--check",
        action="store_true",
        help="Do not write; exit 1 when --output differs from what the policy generates (for CI).",
    )
    values.set_defaults(func=run_values)
    alerts = commands.add_parser(
        "alerts",
        help="Write the Prometheus alerting rules derived from a policy.",
        description=(
            "Validate a policy and write its alerting rules as a Prometheus rules file (for rule_files, and "
            "promtool check rules): p99 TTFVT and E2E per tier and difficulty class against that class's SLO, KV cache "
            "pinned at saturation, stragglers above the autoscaler's limit, shed requests, policy reloads that did not "
            "apply, replicas below their minimum, engine restarts. The chart's PrometheusRule carries the same rules."
        ),
    )
    alerts.add_argument("--policy", required=True, type=Path, help="Policy YAML file to derive the rules from.")
    alerts.add_argument("--output", "-o", type=Path, help="Write to this file instead of standard output.")
    alerts.set_defaults(func=run_alerts)
    defaults = commands.add_parser(
        "defaults",
        help="Write the embedded default policy's values into the chart's values.yaml.",
        description=(
            "Rewrite the generated block of the chart's values.yaml (between its marker lines) with the values of the "
            "embedded default policy, so that `helm install thinktier helm/thinktier` without a values file installs "
            "it. The rest of the file is kept."
        ),
    )
    defaults.add_argument("--values", type=Path, help="The chart's values.yaml (default: this checkout's).")
    defaults.add_argument("--check", action="store_true", help="Do not write; exit 1 when the file is out of date (for CI).")
    defaults.set_defaults(func=run_defaults)
    schema = commands.add_parser(
        "schema",
        help="Write the part of the chart's values.schema.json that describes the generated values.",
        description=(
            "Rewrite the properties of the chart's values.schema.json that `thinktier helm values` fills, from the "
            "policy schema: the types, bounds, choices and help text of the policy fields they carry. The hand-written "
            "rest of the file is kept."
        ),
    )
    schema.add_argument(
        "--schema", type=Path, help="The chart's values.schema.json (default: this checkout's)."
    )
    schema.add_argument("--check", action="store_true", help="Do not write; exit 1 when the file is out of date (for CI).")
    schema.set_defaults(func=run_schema)


def run_values(args: argparse.Namespace) -> int:
    from thinktier.cluster.helm_values import HelmValuesError, render_helm_values

    try:
        text = render_helm_values(args.policy)
    except (PolicyError, HelmValuesError) as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.check:
        if args.output is None:
            print("--check needs --output: the generated file to compare with", file=sys.stderr)
            return 2
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(
                f"{args.output} is out of date with {args.policy}; "
                f"run: thinktier helm values --policy {args.policy} --output {args.output}",
                file=sys.stderr,
            )
            return 1
        return 0
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


def run_alerts(args: argparse.Namespace) -> int:
    from thinktier.cluster.helm_values import render_alert_rules

    try:
        text = render_alert_rules(args.policy)
    except PolicyError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


def run_defaults(args: argparse.Namespace) -> int:
    from thinktier.cluster.helm_values import CHART_VALUES, HelmValuesError, render_chart_defaults

    args.values = args.values or CHART_VALUES
    current = args.values.read_text()
    try:
        text = render_chart_defaults(current)
    except (PolicyError, HelmValuesError) as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.check:
        if current != text:
            print(
                f"{args.values} is out of date with the embedded default policy; run: thinktier helm defaults "
                f"--values {args.values}",
                file=sys.stderr,
            )
            return 1
        return 0
    args.values.write_text(text)
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from thinktier.cluster.helm_values import VALUES_SCHEMA, render_values_schema

    args.schema = args.schema or VALUES_SCHEMA
    current = args.schema.read_text()
    text = render_values_schema(current)
    if args.check:
        if current != text:
            print(
                f"{args.schema} is out of date with the policy schema; run: thinktier helm schema --schema {args.schema}",
                file=sys.stderr,
            )
            return 1
        return 0
    args.schema.write_text(text)
    return 0
