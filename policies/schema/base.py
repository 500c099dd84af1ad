"""What every part of the policy shares: strict models, the deploy-time mark, effort levels and difficulty classes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue
from pydantic.fields import FieldInfo

Effort = Literal["low", "medium", "high"]
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high")
DifficultyClass = Literal["easy", "medium", "hard"]

DEPLOY_TIME: dict[str, JsonValue] = {"deploy_time": True}
"""`json_schema_extra` of a field that is built into the deployments when they start, so that a change to it takes
a redeploy; the live reloader (policies/watcher.py) derives its redeploy set from these marks. Unmarked fields are
read per request and apply live. The mark also shows in policy.schema.json as `"deploy_time": true`."""


def is_deploy_time(field: FieldInfo) -> bool:
    """Whether `field` carries the DEPLOY_TIME mark."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and extra.get("deploy_time") is True


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo in a policy must not be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
