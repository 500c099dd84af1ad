"""JSON Schema of the policy, generated from the pydantic models, for editors that validate YAML as you type.

The committed copy (policies/policy.schema.json) is what a `# yaml-language-server: $schema=...` line
points at; `thinktier policy schema -o policies/policy.schema.json` regenerates it and a test checks
that it is current.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from thinktier.policies.schema import Policy

SCHEMA_FILE = Path(__file__).with_name("policy.schema.json")
DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_NOTE = (
    "The schema checks each field on its own; cross-field rules (thresholds in order, budgets within "
    "the tier's max_model_len, routes naming existing tiers, ...) are checked by `thinktier policy validate`. "
    'Fields with "deploy_time": true are built into the deployments when they start, so a change to one takes a '
    "redeploy; the others apply live when the policy file changes."
)


def policy_json_schema() -> dict[str, Any]:
    """The policy's JSON Schema (draft 2020-12), with every field's description and default."""
    schema = Policy.model_json_schema(mode="validation")
    description = schema.get("description")
    return {
        "$schema": DIALECT,
        **schema,
        "title": "thinktier policy",
        "description": f"{description}\n\n{SCHEMA_NOTE}" if description else SCHEMA_NOTE,
    }


def render_json_schema() -> str:
    """The schema as the text written to policy.schema.json (stable key order, trailing newline)."""
    return json.dumps(policy_json_schema(), indent=2) + "\n"
