"""The tier autoscaling decision on recorded load sequences, and its Ray Serve adapter."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import pytest
from ray.serve._private.common import DeploymentID, ReplicaID
from ray.serve._private.config import DeploymentConfig
from ray.serve.config import AutoscalingConfig, AutoscalingContext
from ray.serve.schema import DeploymentSchema

from thinktier.cluster.autoscaling import (
    POLICY_IMPORT_PATH,
    STATE_KEY,
    KVAwarePolicy,
    ScalerState,
    TierSample,
    decide_replicas,
    serve_autoscaling_config,
)
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Autoscaling, Replicas

TARGETS = Autoscaling(
    signal="kv_and_stragglers",
    target_kv_occupancy=0.7,
    scale_down_kv_occupancy=0.3,
    max_stragglers_per_replica=2,
    target_ongoing_requests=8,
    upscale_delay_s=5,
    downscale_delay_s=30,
)


@dataclass(frozen=True)
class Load:
    """One recorded second of a tier's demand; the replicas that run share it evenly."""

    kv: float
    """Replicas' worth of KV cache the traffic would fill (each replica reports at most 100%)."""
    ongoing: float = 0
    stragglers: int = 0


def sample_of(load: Load, running: int, target: int) -> TierSample:
    reports = tuple(
        ReplicaStats(
            kv_occupancy=min(1.0, load.kv / running),
            num_stragglers=load.stragglers // running + (1 if i < load.stragglers % running else 0),
        )
        for i in range(running)
    )
    return TierSample(reports=reports, ongoing_requests=load.ongoing, target_replicas=target, running_replicas=running)


def replay(loads: list[Load], replicas: Replicas, start: int, targets: Autoscaling = TARGETS, startup_s: int = 0) -> list[int]:
    """Feed one sample per second through the policy; new replicas run `startup_s` after they are asked for.
    Returns the decided replica count after each second."""
    state = ScalerState()
    target = running = start
    asked_at = 0
    history = []
    for now, load in enumerate(loads):
        if running > target or (running < target and now - asked_at >= startup_s):
            running = target
        decision, state = decide_replicas(state, sample_of(load, running, target), targets, replicas, float(now))
        if decision > target:
            asked_at = now
        target = decision
        history.append(target)
    return history


def changes(history: list[int]) -> list[tuple[int, int]]:
    """(second, new count) of every change."""
    return [(t, n) for t, n in enumerate(history) if t and n != history[t - 1]]


def gaps(steps: list[tuple[int, int]]) -> list[int]:
    """Seconds between successive changes."""
    return [b - a for (a, _), (b, _) in pairwise(steps)]


def test_sustained_burst_scales_up_proportionally_in_one_step_after_the_delay():
    quiet, burst = Load(kv=0.3, ongoing=4), Load(kv=0.6, ongoing=40)
    history = replay([quiet] * 10 + [burst] * 30, Replicas(min=1, max=8), start=1)
    # 40 ongoing / 8 per replica: five replicas, added at once when the burst has lasted upscale_delay_s.
    assert changes(history) == [(15, 5)]


def test_burst_shorter_than_the_upscale_delay_adds_nothing():
    quiet, burst = Load(kv=0.3, ongoing=4), Load(kv=0.9, ongoing=40, stragglers=5)
    history = replay(([quiet] * 10 + [burst] * 4) * 5, Replicas(min=1, max=8), start=1)
    assert set(history) == {1}


def test_kv_plateau_near_full_steps_up_after_each_new_replica_runs_and_stops_at_max():
    # Two requests per replica but the KV is full: the request count alone would never scale this tier.
    full = Load(kv=10, ongoing=2)
    history = replay([full] * 120, Replicas(min=1, max=4), start=1, startup_s=20)
    steps = changes(history)
    assert [n for _, n in steps] == [2, 3, 4]
    assert max(history) == 4
    # Each step waits for the previous replica to run (20 s) and then for the upscale delay (5 s).
    assert gaps(steps) == [25, 25]


def test_straggler_pile_up_scales_up_although_kv_and_queue_are_low():
    pile_up = Load(kv=0.4, ongoing=6, stragglers=7)
    history = replay([pile_up] * 10, Replicas(min=1, max=8), start=2)
    # 7 stragglers with at most 2 per replica: four replicas.
    assert changes(history) == [(5, 4)]


def test_flapping_kv_never_moves_the_replica_count():
    high, low = Load(kv=2 * 0.95, ongoing=6), Load(kv=2 * 0.05, ongoing=1)
    history = replay(([high] * 3 + [low] * 3) * 40, Replicas(min=1, max=8), start=2)
    assert set(history) == {2}


def test_scale_down_removes_one_replica_per_downscale_delay_down_to_min():
    idle = Load(kv=0.2, ongoing=1)
    history = replay([idle] * 200, Replicas(min=1, max=8), start=4)
    steps = changes(history)
    assert [n for _, n in steps] == [3, 2, 1]
    assert steps[0][0] == 30
    # The delay restarts with the first sample that shows the smaller tier.
    assert gaps(steps) == [31, 31]


def test_no_scale_down_when_one_replica_fewer_would_pass_the_kv_target():
    # Mean KV 0.45 is below the scale-down threshold 0.5, but on one replica it would be 0.9 > 0.7:
    # scaling down would scale straight back up.
    targets = TARGETS.model_copy(update={"scale_down_kv_occupancy": 0.5})
    history = replay([Load(kv=0.9, ongoing=2)] * 200, Replicas(min=1, max=8), start=2, targets=targets)
    assert set(history) == {2}


def test_stragglers_hold_a_replica_that_kv_alone_would_release():
    history = replay([Load(kv=0.2, ongoing=3, stragglers=3)] * 200, Replicas(min=1, max=8), start=2)
    assert set(history) == {2}


def test_queue_floor_holds_replicas_when_kv_is_low():
    history = replay([Load(kv=0.3, ongoing=24)] * 200, Replicas(min=1, max=8), start=3)
    assert set(history) == {3}


def test_scale_up_is_clamped_to_max():
    history = replay([Load(kv=1, ongoing=400)] * 10, Replicas(min=1, max=3), start=1)
    assert changes(history) == [(5, 3)]


def test_count_outside_bounds_is_corrected_at_once():
    quiet = sample_of(Load(kv=0.1), running=6, target=6)
    decision, _ = decide_replicas(ScalerState(), quiet, TARGETS, Replicas(min=1, max=4), now=0)
    assert decision == 4
    busy = sample_of(Load(kv=0.1, ongoing=100), running=1, target=1)
    decision, _ = decide_replicas(ScalerState(), busy, TARGETS, Replicas(min=2, max=4), now=0)
    assert decision == 2


def test_idle_tier_scales_to_zero_when_min_is_zero():
    history = replay([Load(kv=0)] * 40, Replicas(min=0, max=2), start=1)
    assert changes(history) == [(30, 0)]


def test_a_tier_at_zero_wakes_for_a_request_queued_at_a_handle():
    """Serve counts the requests its handles hold for a deployment with no replica among the tier's ongoing ones."""
    queued = TierSample(reports=(), ongoing_requests=1, target_replicas=0, running_replicas=0)
    replicas = Replicas(min=0, max=2)
    decision, state = decide_replicas(ScalerState(), queued, TARGETS, replicas, now=0)
    assert decision == 0 and state.up_since == 0
    decision, state = decide_replicas(state, queued, TARGETS, replicas, now=TARGETS.upscale_delay_s)
    assert decision == 1 and state.reason.startswith("up 0->1")


def test_a_tick_that_breaks_the_condition_restarts_the_delay():
    busy = sample_of(Load(kv=1.0, ongoing=2), running=1, target=1)
    calm = sample_of(Load(kv=0.5, ongoing=2), running=1, target=1)
    replicas = Replicas(min=1, max=4)
    decision, state = decide_replicas(ScalerState(), busy, TARGETS, replicas, now=0)
    assert (decision, state.up_since) == (1, 0)
    decision, state = decide_replicas(state, calm, TARGETS, replicas, now=4)
    assert (decision, state.up_since) == (1, None)
    decision, state = decide_replicas(state, busy, TARGETS, replicas, now=6)
    decision, state = decide_replicas(state, busy, TARGETS, replicas, now=10)
    assert decision == 1
    decision, state = decide_replicas(state, busy, TARGETS, replicas, now=11)
    assert decision == 2
    assert state.reason.startswith("up 1->2")


def test_no_scale_down_until_every_running_replica_has_reported():
    sample = TierSample(reports=(ReplicaStats(kv_occupancy=0.0),), ongoing_requests=0, target_replicas=3, running_replicas=3)
    state = ScalerState()
    for now in range(100):
        decision, state = decide_replicas(state, sample, TARGETS, Replicas(min=1, max=3), now=float(now))
        assert decision == 3


# The Ray Serve adapter, called with Ray's own context object (no cluster needed).


def _context(kv: dict[str, float], target: int, policy_state: dict, now: float) -> AutoscalingContext:
    deployment = DeploymentID(name="tier-reasoning", app_name="thinktier")
    ids = {name: ReplicaID(unique_id=name, deployment_id=deployment) for name in kv}
    stats = {name: ReplicaStats(kv_occupancy=value).as_metrics() for name, value in kv.items()}
    aggregated = {key: {ids[name]: m[key] for name, m in stats.items()} for key in ReplicaStats().as_metrics()}
    config = AutoscalingConfig(**serve_autoscaling_config_for(min_replicas=1, max_replicas=4))
    return AutoscalingContext(
        deployment_id=deployment,
        deployment_name=deployment.name,
        app_name=deployment.app_name,
        current_num_replicas=len(kv),
        target_num_replicas=target,
        running_replicas=list(ids.values()),
        total_num_requests=2,
        total_queued_requests=0,
        aggregated_metrics=aggregated,
        raw_metrics={},
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=4,
        policy_state=policy_state,
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=now,
        config=config,
    )


def serve_autoscaling_config_for(min_replicas: int, max_replicas: int) -> dict:
    policy = load_policy()
    tier = policy.tiers["reasoning"].model_copy(
        update={"replicas": Replicas(min=min_replicas, max=max_replicas), "autoscaling": TARGETS}
    )
    return serve_autoscaling_config(tier)


def test_serve_autoscaling_config_is_accepted_by_ray_and_carries_the_tier_targets():
    config = AutoscalingConfig(**serve_autoscaling_config_for(min_replicas=1, max_replicas=4))
    assert config.policy.policy_function == POLICY_IMPORT_PATH
    assert Autoscaling.model_validate(config.policy.policy_kwargs) == TARGETS
    # Ray's own delays are off: the policy applies the tier's.
    assert config.upscale_delay_s == 0 and config.downscale_delay_s == 0
    policy = config.policy.get_policy()(**config.policy.policy_kwargs)
    assert policy.targets == TARGETS


def test_adapter_reads_replica_metrics_and_keeps_its_state_in_policy_state():
    policy = KVAwarePolicy(**TARGETS.model_dump())
    decision, state = policy(_context({"a": 0.95, "b": 0.9}, target=2, policy_state={}, now=100.0))
    assert decision == 2
    assert state[STATE_KEY]["up_since"] == 100.0
    decision, state = policy(_context({"a": 0.95, "b": 0.9}, target=2, policy_state=state, now=105.0))
    # 1.85 replicas' worth of KV at a 0.7 target: three replicas.
    assert decision == 3
    assert state[STATE_KEY]["reason"].startswith("up 2->3")


def test_adapter_rejects_bad_targets_with_the_field_name():
    with pytest.raises(ValueError, match="scale_down_kv_occupancy"):
        KVAwarePolicy(target_kv_occupancy=0.5, scale_down_kv_occupancy=0.6)


def test_config_file_form_survives_rays_deployment_config_round_trip():
    """The dict goes into the Serve config file; Ray ships it to the controller as a protobuf."""
    schema = DeploymentSchema(name="tier-reasoning", autoscaling_config=serve_autoscaling_config_for(1, 3))
    shipped = DeploymentConfig(autoscaling_config=schema.autoscaling_config).to_proto_bytes()
    policy = DeploymentConfig.from_proto_bytes(shipped).autoscaling_config.policy
    assert isinstance(policy.get_policy()(**policy.policy_kwargs), KVAwarePolicy)
    assert Autoscaling.model_validate(policy.policy_kwargs) == TARGETS


def test_ongoing_requests_signal_is_ray_serve_default_policy_with_the_tier_delays():
    tier = load_policy().tiers["reasoning"]
    tier = tier.model_copy(update={
        "replicas": Replicas(min=1, max=3),
        "autoscaling": tier.autoscaling.model_copy(update={"signal": "ongoing_requests"}),
    })
    raw = serve_autoscaling_config(tier)
    config = AutoscalingConfig(**raw)
    assert "policy" not in raw  # Ray's default request-count policy
    assert (config.upscale_delay_s, config.downscale_delay_s) == (tier.autoscaling.upscale_delay_s,
                                                                  tier.autoscaling.downscale_delay_s)
    assert config.target_ongoing_requests == tier.autoscaling.target_ongoing_requests
