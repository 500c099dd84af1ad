"""`thinktier policy`: validate policy files, write the JSON Schema for editors, apply a policy to a ConfigMap."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thinktier.policies.json_schema import render_json_schema
from thinktier.policies.loader import PolicyError, load_policy
from thinktier.policies.schema import Policy


def summarize(policy: Policy) -> str:
    """One line: the tiers (model, accelerator, replicas), where requests that name no tier's model go, and which
    tiers lend to which."""
    tiers = ", ".join(
        f"{name} ({tier.model} on {tier.pool.accelerator}, replicas {tier.replicas.min}-{tier.replicas.max}"
        f"{', thinking' if tier.thinking else ''})"
        for name, tier in policy.tiers.items()
    )
    routing = policy.routing
    if routing.classifier.enabled:
        t = routing.thresholds
        routes = f"score >= {t.reasoning} -> {routing.reasoning_tier} (medium >= {t.medium}, high >= {t.high})"
        routes += f", below -> {routing.chat_tier}" if routing.chat_tier else ""
    else:
        routes = f"no classifier: -> {routing.reasoning_tier} (effort from the request, else {routing.default_effort})"
    tenants = _count(len(policy.tenants), "tenant")
    lending = "".join(f"; {rule.lender} lends to {rule.borrower} (up to {rule.max_share:.0%} of its slots)"
                      for rule in policy.lending)
    return f"{_count(len(policy.tiers), 'tier')}: {tiers}; requests naming no model: {routes}{lending}; {tenants}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _validate(args: argparse.Namespace) -> int:
    failed = 0
    for file in args.files:
        try:
            policy = load_policy(file)
        except PolicyError as exc:
            failed += 1
            for problem in exc.problems:
                print(problem)
            print(f"{file}: {_count(len(exc.problems), 'problem')}", file=sys.stderr)
            continue
        print(f"{file}: OK: {summarize(policy)}")
    return 1 if failed else 0


def _schema(args: argparse.Namespace) -> int:
    text = render_json_schema()
    if args.output is None:
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _apply(args: argparse.Namespace) -> int:
    # Imported here: the kubernetes client is slow to import and only this command needs it.
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    from thinktier.cluster.kube import NeedsHelmUpgrade, apply_policy, core_api

    target = f"configmap {args.namespace}/{args.configmap} key {args.key}"
    try:
        api = core_api(args.context) if args.context else None  # None: apply_policy validates before connecting
        outcome = apply_policy(args.file, configmap=args.configmap, namespace=args.namespace, key=args.key, api=api)
    except PolicyError as exc:
        for problem in exc.problems:
            print(problem)
        print(f"{args.file}: not applied: {_count(len(exc.problems), 'problem')}", file=sys.stderr)
        return 1
    except NeedsHelmUpgrade as exc:
        print(f"{args.file}: {exc}", file=sys.stderr)
        return 2
    except ConfigException as exc:
        print(f"no Kubernetes credentials: {exc}; pass --context or run inside the cluster", file=sys.stderr)
        return 1
    except ApiException as exc:
        print(f"{target}: Kubernetes API refused: {exc.status} {exc.reason}", file=sys.stderr)
        return 1
    print(f"{args.file}: {outcome} {target}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    policy = subparsers.add_parser(
        "policy",
        help="validate policy files, write their JSON Schema, apply one to a cluster",
        description="Work with thinktier policy files (the YAML that sets tiers, routing, budgets, SLOs and tenants).",
    )
    commands = policy.add_subparsers(title="policy commands", metavar="COMMAND", required=True)

    validate = commands.add_parser(
        "validate",
        help="check policy files and list every problem",
        description="Check each FILE against the policy schema, including cross-field rules (thresholds in order, "
        "budgets within max_model_len, routes naming existing tiers). Every problem is printed as "
        "'file:line:col: field: message'; a valid file gets a one-line summary of its tiers and routes. "
        "Exit status 0 when all files are valid, 1 otherwise.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="policy YAML file(s)")
    validate.set_defaults(func=_validate)

    schema = commands.add_parser(
        "schema",
        help="write the policy's JSON Schema (for editor validation)",
        description="Write the JSON Schema of the policy, generated from the pydantic models with every field's "
        "description and default. Point a YAML language server at it with a first line "
        "'# yaml-language-server: $schema=<path or URL>' (see policies/README.md).",
    )
    schema.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    schema.set_defaults(func=_schema)

    apply = commands.add_parser(
        "apply",
        help="validate a policy and write it into the ConfigMap the running service watches",
        description="Validate FILE, then create or update KEY of ConfigMap NAME in namespace NS. The service "
        "reloads it live (about a minute for the kubelet to swap the mounted file). A change the running service "
        "cannot take from the ConfigMap (deploy-time fields such as tiers, models, engine arguments and replicas; a "
        "tenant or metrics key variable the pods do not have) is refused, exit status 2, with the helm upgrade that "
        "brings it in.",
    )
    apply.add_argument("file", metavar="FILE", help="policy YAML file")
    apply.add_argument("--configmap", required=True, metavar="NAME", help="ConfigMap that holds the policy")
    apply.add_argument("--namespace", required=True, metavar="NS", help="namespace of the ConfigMap")
    apply.add_argument("--key", default="policy.yaml", help="data key of the policy in the ConfigMap (default: %(default)s)")
    apply.add_argument(
        "--context", metavar="CTX", help="kubeconfig context; default: in-cluster config, else the current context"
    )
    apply.set_defaults(func=_apply)
