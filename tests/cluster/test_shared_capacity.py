"""Tiers sharing one pool of devices: sizes follow the load, and together they never hold more than the pool."""

from __future__ import annotations

from dataclasses import replace

import pytest
from ray.serve._private.common import DeploymentID

from thinktier.cluster.serve_config import serve_config
from thinktier.cluster.shared_capacity import POLICY_IMPORT_PATH, PoolTier, SharedCapacityPolicy, fair_shares, share_pool
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Policy


def tier(name: str, current: int, wanted: int, minimum: int = 1, devices: float = 1.0, delay_s: float = 0.0,
         since: float | None = None) -> PoolTier:
    return PoolTier(name, current, wanted, minimum, devices, delay_s, since)


def replicas(tiers: list[PoolTier], total: float, now: float = 0.0) -> dict[str, int]:
    return {name: d.replicas for name, d in share_pool(tiers, total, now).items()}


def test_wishes_that_fit_the_pool_are_met_as_each_tier_decided() -> None:
    assert replicas([tier("reasoning", 4, 6), tier("chat", 3, 2)], total=10) == {"reasoning": 6, "chat": 2}


def test_a_tier_grows_into_what_an_idle_tier_leaves_and_not_beyond_the_pool() -> None:
    # chat idles at its min; reasoning wants 12 of a 10-device pool: it gets all chat does not hold.
    assert replicas([tier("reasoning", 3, 12), tier("chat", 1, 1)], total=10) == {"reasoning": 9, "chat": 1}


def test_when_both_want_more_than_the_pool_the_total_is_split_by_how_much_each_wants() -> None:
    shares = fair_shares([tier("reasoning", 1, 12), tier("chat", 1, 4)], total=8)
    assert shares == {"reasoning": 6, "chat": 2}
    assert sum(shares.values()) == 8


def test_every_tier_keeps_its_min_however_much_the_other_wants() -> None:
    shares = fair_shares([tier("reasoning", 1, 50), tier("chat", 2, 2, minimum=2)], total=10)
    assert shares == {"reasoning": 8, "chat": 2}


def test_replicas_holding_more_devices_count_for_more_of_the_pool() -> None:
    # reasoning replicas hold 2 GPUs (tensor parallel), chat 0.25: 8 GPUs hold 3 reasoning and 8 chat replicas.
    decided = replicas([tier("reasoning", 1, 3, devices=2), tier("chat", 1, 8, devices=0.25)], total=8)
    assert decided == {"reasoning": 3, "chat": 8}
    assert replicas([tier("reasoning", 1, 4, devices=2), tier("chat", 1, 8, devices=0.25)], total=8)["reasoning"] < 4


def test_a_tier_above_its_share_gives_back_after_its_delay_and_the_devices_go_to_the_short_tier_next() -> None:
    # reasoning took the whole pool while chat idled; now chat wants 4 and nothing is free.
    reasoning, chat = tier("reasoning", 9, 9, delay_s=30), tier("chat", 1, 4)
    first = share_pool([reasoning, chat], 10, now=100.0)
    assert (first["reasoning"].replicas, first["chat"].replicas) == (9, 1)  # the owner is not disturbed at once
    later = share_pool([replace(reasoning, give_back_since=first["reasoning"].give_back_since), chat], 10, now=130.0)
    assert later["reasoning"].replicas == later["reasoning"].share < 9
    after = replicas([tier("reasoning", later["reasoning"].replicas, 9), chat], 10)
    assert after["chat"] == 10 - after["reasoning"] > 1


def test_the_give_back_wait_restarts_when_the_shortage_ends() -> None:
    reasoning = tier("reasoning", 9, 9, delay_s=30, since=100.0)
    calm = share_pool([reasoning, tier("chat", 1, 1)], 10, now=120.0)
    assert calm["reasoning"].give_back_since is None
    assert calm["reasoning"].replicas == 9


@pytest.mark.parametrize("seed", range(20))
def test_the_tiers_never_hold_more_than_the_pool_together(seed: int) -> None:
    import random

    rng = random.Random(seed)
    devices = {"a": 2.0, "b": 0.5, "c": 1.0}
    current = {"a": 1, "b": 1, "c": 1}
    since: dict[str, float | None] = dict.fromkeys(devices)
    for now in range(200):
        tiers = [tier(n, current[n], rng.randint(1, 12), devices=d, delay_s=rng.choice([0, 3]), since=since[n])
                 for n, d in devices.items()]
        decided = share_pool(tiers, 12, float(now))
        current = {n: d.replicas for n, d in decided.items()}
        since = {n: d.give_back_since for n, d in decided.items()}
        assert sum(current[n] * devices[n] for n in devices) <= 12
        assert all(current[n] >= 1 for n in devices)


# ---- the Ray Serve policy ------------------------------------------------------------------------------------------


def shared_policy(total: float = 2.0) -> Policy:
    data = load_policy().model_dump(mode="json")
    for name in ("reasoning", "chat"):
        data["tiers"][name]["replicas"] = {"min": 1, "max": 3}
    data["shared_capacity"] = [{"tiers": ["reasoning", "chat"], "total": total}]
    return Policy.model_validate(data)


def test_the_serve_config_carries_the_application_policy_only_where_tiers_share() -> None:
    application = serve_config(shared_policy(), "/p.yaml")["applications"][0]
    assert application["autoscaling_policy"]["policy_function"] == POLICY_IMPORT_PATH
    pool = application["autoscaling_policy"]["policy_kwargs"]["pools"][0]
    assert pool == {"total": 2.0, "tiers": {"tier-reasoning": {"devices": 0.5, "give_back_delay_s": 0.0},
                                            "tier-chat": {"devices": 0.5, "give_back_delay_s": 0.0}}}
    assert "autoscaling_policy" not in serve_config(load_policy(), "/p.yaml")["applications"][0]


class Context:
    """The fields of Ray Serve's AutoscalingContext that the policy reads."""

    def __init__(self, name: str, target: int, own: float) -> None:
        self.deployment_name = name
        self.target_num_replicas = target
        self.capacity_adjusted_min_replicas, self.capacity_adjusted_max_replicas = 1, 6
        self.policy_state: dict[str, object] = {}
        self.current_time = 50.0
        self.own = own


def test_the_application_policy_runs_each_deployment_own_policy_then_caps_the_pool() -> None:
    policy = SharedCapacityPolicy([{"total": 4, "tiers": {"tier-a": {"devices": 1, "give_back_delay_s": 0},
                                                           "tier-b": {"devices": 1, "give_back_delay_s": 0}}}])
    contexts = {DeploymentID(name, "app"): Context(name, 1, own) for name, own in
                (("tier-a", 5.2), ("tier-b", 1.0), ("ingress", 2.0))}
    for deployment in contexts:
        policy.own_policies[deployment] = lambda c: (c.own, {})
    decisions, states = policy(contexts)  # type: ignore[arg-type]
    assert {d.name: n for d, n in decisions.items()} == {"tier-a": 3, "tier-b": 1, "ingress": 2.0}
    assert states[DeploymentID("tier-a", "app")]["thinktier_pool"]["reason"].startswith("held at 3")
