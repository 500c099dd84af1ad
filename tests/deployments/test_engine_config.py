"""Engine arguments come from the policy; GPU-only features fail with what to change: at validation where the
policy alone decides (KV offload on a CPU tier), at engine start where the serving machine does (FP8 KV on a CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from thinktier.deployments.tier import engine
from thinktier.deployments.tier.engine import HostCannotServe, check_host, engine_kwargs
from thinktier.policies.loader import PolicyError, load_policy, parse_policy

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
CPU_TIER = """
version: 1
tiers:
  reasoning:
    model: builtin:tiny-random
    pool: {{accelerator: {accelerator}, memory_gib: {memory_gib}}}
    engine: {{kv_cache_memory_gib: 0.1, {extra}}}
routing: {{chat_tier: null}}
"""


def tier_text(extra: str, accelerator: str = "cpu", memory_gib: float = 32) -> str:
    return CPU_TIER.format(extra=extra, accelerator=accelerator, memory_gib=memory_gib)


def test_fp8_kv_on_a_cpu_without_avx512_is_refused_at_engine_start_with_a_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = parse_policy(tier_text("kv_cache_dtype: fp8"), "p.yaml")  # valid: the serving machine may have AVX-512
    monkeypatch.setattr(engine, "cpu_supports_fp8_kv", lambda: False)  # as on the project's AVX2-only machines
    with pytest.raises(HostCannotServe) as err:
        engine.TierEngine("reasoning", policy.tiers["reasoning"])
    message = str(err.value)
    assert message.startswith("engine.kv_cache_dtype: 'fp8'")
    assert "AVX-512" in message and "kv_cache_dtype: auto" in message


def test_fp8_kv_on_a_cpu_with_avx512_passes_the_host_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "cpu_supports_fp8_kv", lambda: True)
    policy = parse_policy(tier_text("kv_cache_dtype: fp8"), "p.yaml")
    check_host(policy.tiers["reasoning"])
    assert engine_kwargs(policy.tiers["reasoning"], "/m")["kv_cache_dtype"] == "fp8"


def test_native_kv_offload_on_a_cpu_tier_is_refused_with_a_fix() -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(tier_text("kv_offloading: {mode: native, size_gib: 8}"), "p.yaml")
    assert "only from CUDA or XPU GPUs" in str(err.value) and "use mode: preempted" in str(err.value)


def test_gpu_tier_maps_fp8_offload_and_priority_to_vllm_arguments() -> None:
    policy = parse_policy(tier_text("kv_cache_dtype: fp8, kv_offloading: {mode: native, size_gib: 24}", accelerator="gpu"))
    kwargs = engine_kwargs(policy.tiers["reasoning"], "/models/r1")
    assert kwargs["kv_cache_dtype"] == "fp8"
    assert (kwargs["kv_offloading_size"], kwargs["kv_offloading_backend"]) == (24, "native")
    assert "kv_transfer_config" not in kwargs
    assert kwargs["scheduling_policy"] == "priority"
    assert kwargs["kv_cache_memory_bytes"] == int(0.1 * (1 << 30))


def test_preempt_offload_names_the_projects_connector_and_its_host_memory() -> None:
    """Mode 'preempted' runs on CPU tiers too; vLLM loads the connector by the module path it is given."""
    import importlib

    policy = parse_policy(tier_text("kv_offloading: {mode: preempted, size_gib: 1.5}", memory_gib=4), "p.yaml")
    config = engine_kwargs(policy.tiers["reasoning"], "/m")["kv_transfer_config"]
    connector = getattr(importlib.import_module(config["kv_connector_module_path"]), config["kv_connector"])
    assert connector.__name__ == "PreemptOffloadConnector" and config["kv_role"] == "kv_producer"
    assert config["kv_connector_extra_config"] == {"host_bytes": int(1.5 * (1 << 30))}


@pytest.mark.parametrize(
    ("offloading", "memory_gib", "message"),
    [
        ("{size_gib: 8}", 16, "with mode 'off' would do nothing; set mode: preempted (or native), or size_gib: 0"),
        ("{mode: preempted}", 16, "kv_offloading.mode: 'preempted' needs host memory; set size_gib"),
        ("{mode: preempted, size_gib: 8, backend: lmcache}", 16, "backend: 'lmcache' applies to mode 'native' only"),
        ("{mode: preempted, size_gib: 8}", 9, "do not fit pool.memory_gib (9); raise pool.memory_gib to at least 10"),
    ],
)
def test_kv_offloading_settings_that_contradict_each_other(offloading: str, memory_gib: int, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(tier_text(f"kv_offloading: {offloading}", memory_gib=memory_gib), "p.yaml")
    assert message in str(err.value)


def test_default_policy_cpu_engine_arguments() -> None:
    kwargs = engine_kwargs(load_policy().tiers["chat"], "/m")
    assert kwargs["dtype"] == "float32" and kwargs["enforce_eager"] is True
    assert "kv_offloading_size" not in kwargs and kwargs["kv_cache_dtype"] == "auto"


def test_tiers_that_share_a_gpu_ask_ray_for_their_share() -> None:
    from thinktier.cluster.serve_config import deployment_options, tier_deployment_name

    policy = load_policy(EXAMPLES / "gpu-fullstack-tiered.yaml")
    options = deployment_options(policy)
    asks = {name: options[tier_deployment_name(name)]["ray_actor_options"]["num_gpus"] for name in policy.tiers}
    assert asks == {"reasoning": 0.75, "chat": 0.25}  # two reasoning replicas on two GPUs, the chat replica beside one
    assert options[tier_deployment_name("reasoning")]["num_replicas"] == 2


def test_the_engine_runs_vllms_own_scheduler_reporting_each_requests_preemptions() -> None:
    """The scheduler vLLM would pick (async on a GPU), with each finished request's preemption count added to what a
    KV connector hands back, never in place of it."""
    from types import SimpleNamespace

    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from thinktier.deployments.tier import preemption_count

    policy = parse_policy(tier_text("kv_offloading: {mode: preempted, size_gib: 1.5}", memory_gib=4), "p.yaml")
    factory = resolve_obj_by_qualname(engine_kwargs(policy.tiers["reasoning"], "/m")["scheduler_cls"])
    assert factory is preemption_count.counting_scheduler
    assert issubclass(preemption_count._counting(AsyncScheduler), AsyncScheduler)
    assert not issubclass(preemption_count._counting(Scheduler), AsyncScheduler)

    class Connected:
        def _connector_finished(self, request: object) -> tuple[bool, dict[str, object] | None]:
            return True, {"remote_block_ids": [7]}

    counting = preemption_count._counting(Connected)()
    finished = SimpleNamespace(num_preemptions=3)
    assert counting._connector_finished(finished) == (True, {"remote_block_ids": [7], preemption_count.KEY: 3})
    assert preemption_count.preemptions_of(SimpleNamespace(kv_transfer_params={preemption_count.KEY: 3})) == 3
    assert preemption_count.preemptions_of(SimpleNamespace(kv_transfer_params=None)) == 0
