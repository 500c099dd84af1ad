"""The thinktier policy: the one file platform engineers edit.

Every knob of the service lives here, typed, with its default and its help
text. Validation, defaults, the Ray Serve config, the Helm values and the JSON
Schema for editors are all derived from these models; nothing restates them.

One module per part of the policy (base: what they all share; engine and pool: a tier's replicas; budgets;
autoscaling; tier; routing; lending; shared_capacity: tiers that share one pool of devices; slos; server: the endpoint
and its tenants; policy: the whole file); every public name is importable from here.
"""

from __future__ import annotations

from thinktier.policies.schema.autoscaling import Autoscaling, RouterWeights, Stragglers
from thinktier.policies.schema.base import DEPLOY_TIME, EFFORTS, DifficultyClass, Effort, StrictModel, is_deploy_time
from thinktier.policies.schema.budgets import DYNASOR_PROBE, Budget, EarlyExit, Voting
from thinktier.policies.schema.engine import BudgetProcessor, EngineArgs, KVCacheDType, KVOffloading
from thinktier.policies.schema.lending import Lending
from thinktier.policies.schema.policy import Policy
from thinktier.policies.schema.pool import Accelerator, Pool, Replicas
from thinktier.policies.schema.routing import Classifier, Degradation, Routing, Thresholds
from thinktier.policies.schema.server import ANONYMOUS, ENV_NAME, Server, Tenant
from thinktier.policies.schema.shared_capacity import SharedCapacity, replica_devices
from thinktier.policies.schema.slos import SLO
from thinktier.policies.schema.tier import Tier

__all__ = [
    "ANONYMOUS",
    "DEPLOY_TIME",
    "DYNASOR_PROBE",
    "EFFORTS",
    "ENV_NAME",
    "SLO",
    "Accelerator",
    "Autoscaling",
    "Budget",
    "BudgetProcessor",
    "Classifier",
    "Degradation",
    "DifficultyClass",
    "EarlyExit",
    "Effort",
    "EngineArgs",
    "KVCacheDType",
    "KVOffloading",
    "Lending",
    "Policy",
    "Pool",
    "Replicas",
    "RouterWeights",
    "Routing",
    "Server",
    "SharedCapacity",
    "Stragglers",
    "StrictModel",
    "Tenant",
    "Thresholds",
    "Tier",
    "Voting",
    "is_deploy_time",
    "replica_devices",
]
