"""Live policy reload on real files, updated the way the kubelet updates a mounted ConfigMap."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import threading
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from pydantic import Field

from thinktier.policies.loader import DEFAULT_POLICY, load_policy, parse_policy
from thinktier.policies.schema import DEPLOY_TIME, Policy, Replicas, RouterWeights, Server, StrictModel, Tenant, is_deploy_time
from thinktier.policies.watcher import PolicyChange, PolicyWatcher, deploy_time_fields, policy_change

DEFAULT = DEFAULT_POLICY.read_text()
THRESHOLDS = "thresholds: {reasoning: 0.3, medium: 0.6, high: 0.8}"
_versions = itertools.count()


def edit(old: str, new: str, text: str = DEFAULT) -> str:
    assert text.count(old) >= 1, f"{old!r} must occur in policies/default.yaml"
    return text.replace(old, new, 1)


class ConfigMapVolume:
    """A directory laid out like a mounted ConfigMap: policy.yaml -> ..data/policy.yaml, ..data -> ..<version>."""

    def __init__(self, root: Path, text: str) -> None:
        self.root = root
        self.path = root / "policy.yaml"
        self.update(text)
        self.path.symlink_to(Path("..data") / "policy.yaml")

    def update(self, text: str) -> None:
        """Write a new version and swap `..data` to it with one rename, then drop the old version (as the kubelet does)."""
        old = (self.root / "..data").resolve() if (self.root / "..data").exists() else None
        version = self.root / f"..2026_11_29_{next(_versions):04d}"
        version.mkdir()
        (version / "policy.yaml").write_text(text)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, self.root / "..data")
        if old is not None:
            shutil.rmtree(old)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Policy, PolicyChange]] = []
        self.threads: list[int] = []
        self.called = threading.Event()

    def __call__(self, policy: Policy, change: PolicyChange) -> None:
        self.calls.append((policy, change))
        self.threads.append(threading.get_ident())
        self.called.set()


def reloads(outcome: str) -> float:
    return REGISTRY.get_sample_value("thinktier_policy_reloads_total", {"outcome": outcome}) or 0.0


@pytest.fixture
def volume(tmp_path: Path) -> ConfigMapVolume:
    return ConfigMapVolume(tmp_path, DEFAULT)


def test_live_change_through_a_symlink_swap_is_applied(volume: ConfigMapVolume) -> None:
    recorder = Recorder()
    watcher = PolicyWatcher(volume.path, recorder)
    before = reloads("applied")
    assert watcher.poll() is None

    volume.update(edit(THRESHOLDS, "thresholds: {reasoning: 0.4, medium: 0.6, high: 0.8}"))
    assert watcher.poll() == "applied"

    [(policy, change)] = recorder.calls
    assert policy.routing.thresholds.reasoning == 0.4
    assert change == PolicyChange(live=("routing.thresholds.reasoning",))
    assert watcher.current is policy and watcher.last_error is None
    assert reloads("applied") == before + 1
    assert watcher.poll() is None  # the same content is not applied twice
    assert watcher.reloads == {"applied": 1, "rejected": 0, "needs_redeploy": 0}


def test_bad_edit_is_rejected_and_the_last_good_policy_keeps_serving(volume: ConfigMapVolume, caplog) -> None:
    recorder = Recorder()
    watcher = PolicyWatcher(volume.path, recorder)
    good = watcher.current
    before = reloads("rejected")

    volume.update(edit(THRESHOLDS, "thresholds: {reasoning: 0.9, medium: 0.6, high: 0.8}"))
    with caplog.at_level(logging.ERROR, logger="thinktier.policies.watcher"):
        assert watcher.poll() == "rejected"

    assert watcher.current is good and recorder.calls == []
    assert "routing.thresholds: thresholds must be in order reasoning <= medium <= high" in watcher.last_error
    assert "keeps serving" in caplog.text and "routing.thresholds" in caplog.text
    assert reloads("rejected") == before + 1
    assert watcher.poll() is None and reloads("rejected") == before + 1  # counted once, not once per poll

    volume.update(edit(THRESHOLDS, "thresholds: {reasoning: 0.35, medium: 0.6, high: 0.8}"))
    assert watcher.poll() == "applied"
    assert watcher.current.routing.thresholds.reasoning == 0.35 and watcher.last_error is None


def test_change_needing_new_engines_is_reported_and_nothing_of_it_applied(volume: ConfigMapVolume, caplog) -> None:
    recorder = Recorder()
    watcher = PolicyWatcher(volume.path, recorder)
    serving = watcher.current
    before = reloads("needs_redeploy")

    text = edit("max_num_seqs: 16", "max_num_seqs: 8")  # the reasoning tier's engine
    volume.update(edit(THRESHOLDS, "thresholds: {reasoning: 0.4, medium: 0.6, high: 0.8}", text))
    with caplog.at_level(logging.WARNING, logger="thinktier.policies.watcher"):
        assert watcher.poll() == "needs_redeploy"

    assert recorder.calls == [] and watcher.current is serving  # not even the live threshold change
    assert "tiers.reasoning.engine.max_num_seqs" in watcher.last_error and "redeploy" in watcher.last_error
    assert "tiers.reasoning.engine.max_num_seqs" in caplog.text
    assert reloads("needs_redeploy") == before + 1
    assert watcher.reloads == {"applied": 0, "rejected": 0, "needs_redeploy": 1}

    volume.update(DEFAULT)  # reverted: nothing to do, and no error left standing
    assert watcher.poll() is None and watcher.last_error is None


def test_comment_only_edit_changes_nothing(volume: ConfigMapVolume) -> None:
    recorder = Recorder()
    watcher = PolicyWatcher(volume.path, recorder)
    volume.update("# reviewed 2026-11-29\n" + DEFAULT)
    assert watcher.poll() is None and recorder.calls == []


def test_missing_file_is_rejected_and_serving_continues(volume: ConfigMapVolume) -> None:
    watcher = PolicyWatcher(volume.path, Recorder())
    serving = watcher.current
    shutil.rmtree((volume.root / "..data").resolve())
    assert watcher.poll() == "rejected"
    assert "cannot read policy file" in watcher.last_error and watcher.current is serving


def test_a_plain_file_applies_only_once_two_polls_read_the_same(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    tenants = "tenants:\n  acme: {api_key_env: THINKTIER_KEY_ACME}\n"
    path.write_text(DEFAULT + tenants)
    recorder = Recorder()
    watcher = PolicyWatcher(path, recorder)
    edited = edit(THRESHOLDS, "thresholds: {reasoning: 0.4, medium: 0.6, high: 0.8}") + tenants
    path.write_text(edited[: edited.index("tenants:")])  # caught mid-write: still a valid policy, without its tenants
    assert watcher.poll() is None and watcher.current.tenants  # not applied: it may still be growing
    path.write_text(edited)  # the write completes
    assert watcher.poll() is None and recorder.calls == []
    assert watcher.poll() == "applied"
    [(policy, _)] = recorder.calls
    assert policy.routing.thresholds.reasoning == 0.4 and list(policy.tenants) == ["acme"]


def test_a_file_that_is_not_utf8_is_rejected_and_serving_continues(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(DEFAULT)
    watcher = PolicyWatcher(path, Recorder())
    serving = watcher.current
    path.write_bytes(DEFAULT.encode() + b"# \xff\xfe\n")
    assert watcher.poll() == "rejected"
    assert "not UTF-8 text" in watcher.last_error and watcher.current is serving


def test_failing_on_change_keeps_the_old_policy(volume: ConfigMapVolume) -> None:
    def refuse(policy: Policy, change: PolicyChange) -> None:
        raise RuntimeError("router busy")

    watcher = PolicyWatcher(volume.path, refuse)
    serving = watcher.current
    volume.update(edit(THRESHOLDS, "thresholds: {reasoning: 0.4, medium: 0.6, high: 0.8}"))
    assert watcher.poll() == "rejected"
    assert watcher.current is serving and "router busy" in watcher.last_error


def test_thread_mode_picks_up_a_swap(volume: ConfigMapVolume) -> None:
    recorder = Recorder()
    watcher = PolicyWatcher(volume.path, recorder, interval_s=0.05)
    watcher.start()
    try:
        volume.update(edit(THRESHOLDS, "thresholds: {reasoning: 0.4, medium: 0.6, high: 0.8}"))
        assert recorder.called.wait(timeout=10)
    finally:
        watcher.stop()
    assert recorder.threads[0] != threading.get_ident()
    assert watcher.current.routing.thresholds.reasoning == 0.4


def test_asyncio_mode_runs_on_the_event_loop(volume: ConfigMapVolume) -> None:
    recorder = Recorder()

    async def main() -> int:
        watcher = PolicyWatcher(volume.path, recorder, interval_s=0.05)
        watcher.start()
        try:
            volume.update(edit(THRESHOLDS, "thresholds: {reasoning: 0.4, medium: 0.6, high: 0.8}"))
            for _ in range(200):
                if recorder.calls:
                    break
                await asyncio.sleep(0.05)
        finally:
            watcher.stop()
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert recorder.threads == [loop_thread]


def test_starting_with_an_invalid_policy_fails_loudly(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path, edit("max_num_seqs: 16", "max_num_seqs: 0"))
    with pytest.raises(ValueError, match=r"tiers\.reasoning\.engine\.max_num_seqs: must be >= 1, got 0"):
        PolicyWatcher(volume.path, Recorder())


# --- policy_change, the pure classification ------------------------------------------------------


def test_policy_change_separates_live_from_redeploy() -> None:
    old = load_policy(DEFAULT_POLICY)
    new = old.model_copy(
        update={
            "tenants": {"beta": Tenant(api_key_env="THINKTIER_KEY_BETA")},
            "slos": {**old.slos, "easy": old.slos["easy"].model_copy(update={"ttfvt_s": 3})},
        }
    )
    assert policy_change(old, new) == PolicyChange(
        live=("slos.easy.ttfvt_s", "tenants.beta")
    )


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("model: builtin:smollm2-135m-think", "model: /models/other", "tiers.reasoning.model"),
        ("kv_cache_memory_gib: 0.25", "kv_cache_memory_gib: 0.5", "tiers.reasoning.engine.kv_cache_memory_gib"),
        ("replicas: {min: 1, max: 1}", "replicas: {min: 1, max: 2}", "tiers.reasoning.replicas.max"),
        ("pool: {accelerator: cpu, num_cpus: 0.5, memory_gib: 2}", "pool: {accelerator: cpu, num_cpus: 1, memory_gib: 2}",
         "tiers.reasoning.pool.num_cpus"),
        ("stragglers: {thinking_tokens: 384, elapsed_s: 30}", "stragglers: {thinking_tokens: 300, elapsed_s: 30}",
         "tiers.reasoning.stragglers.thinking_tokens"),
        ("port: 8000", "port: 8001", "server.port"),
    ],
)
def test_policy_change_needing_redeploy(old: str, new: str, field: str) -> None:
    change = policy_change(load_policy(DEFAULT_POLICY), parse_policy(edit(old, new)))
    assert change.needs_redeploy and change.redeploy == (field,) and change.live == ()


def test_adding_a_tier_needs_a_redeploy() -> None:
    old = load_policy(DEFAULT_POLICY)
    tiers = {**old.tiers, "draft": old.tiers["chat"].model_copy(update={"served_model_name": "thinktier-draft"})}
    change = policy_change(old, old.model_copy(update={"tiers": tiers}))
    assert change.redeploy == ("tiers.draft",)


def test_budgets_apply_live() -> None:
    change = policy_change(
        load_policy(DEFAULT_POLICY),
        parse_policy(edit("medium: {thinking_tokens: 192,", "medium: {thinking_tokens: 256,")),
    )
    assert change == PolicyChange(live=("tiers.reasoning.budgets.medium.thinking_tokens",))
    assert str(change) == "live: tiers.reasoning.budgets.medium.thinking_tokens"


# One new value for every Server field (a new field needs one here): the section mixes both kinds.
SERVER_EDITS = {
    "host": "0.0.0.0",
    "port": 8001,
    "max_body_bytes": 2048,
    "allow_anonymous": False,
    "ingress_replicas": Replicas(min=1, max=4),
    "ingress_target_ongoing_requests": 32,
    "http_proxy": "serve",
    "stream_interval_ms": 0,
    "metrics_api_key_env": "THINKTIER_METRICS_KEY",
    "body_read_timeout_s": 5,
    "tier_timeout_s": 60,
    "tier_idle_timeout_s": 5,
    "cold_start_timeout_s": 30,
    "drain_timeout_s": 120,
    "load_board_timeout_s": 1,
    "log_encoding": "text",
}


@pytest.mark.parametrize("field", SERVER_EDITS)
def test_a_field_needs_a_redeploy_exactly_when_the_schema_marks_it_deploy_time(field: str) -> None:
    assert SERVER_EDITS.keys() == Server.model_fields.keys()
    old = load_policy(DEFAULT_POLICY)
    new = old.model_copy(update={"server": old.server.model_copy(update={field: SERVER_EDITS[field]})})
    change = policy_change(old, new)
    assert change
    if is_deploy_time(Server.model_fields[field]):
        assert change.live == () and all(path.startswith(f"server.{field}") for path in change.redeploy)
    else:
        assert change == PolicyChange(live=(f"server.{field}",))


def test_stream_interval_and_ingress_scaling_need_a_redeploy_body_limit_applies_live() -> None:
    old = load_policy(DEFAULT_POLICY)
    edits = {"stream_interval_ms": 0, "ingress_replicas": Replicas(min=2, max=2), "max_body_bytes": 4096}
    server = old.server.model_copy(update=edits)
    change = policy_change(old, old.model_copy(update={"server": server}))
    assert change.redeploy == ("server.ingress_replicas.max", "server.ingress_replicas.min", "server.stream_interval_ms")
    assert change.live == ("server.max_body_bytes",)


def test_router_weights_need_a_redeploy() -> None:
    old = load_policy(DEFAULT_POLICY)
    tier = old.tiers["reasoning"].model_copy(update={"router_weights": RouterWeights(kv=4)})
    change = policy_change(old, old.model_copy(update={"tiers": {**old.tiers, "reasoning": tier}}))
    assert change == PolicyChange(redeploy=("tiers.reasoning.router_weights.kv",))


class _Section(StrictModel):
    built: int = Field(0, json_schema_extra=DEPLOY_TIME)
    read: int = 0


class _Root(StrictModel):
    named: dict[str, _Section] = Field(default_factory=dict)
    one: _Section = Field(default_factory=_Section)
    whole: _Section = Field(default_factory=_Section, json_schema_extra=DEPLOY_TIME)
    flag: bool = False


def test_redeploy_fields_are_derived_from_the_marks() -> None:
    assert sorted(deploy_time_fields(_Root)) == ["named.*.built", "one.built", "whole"]
