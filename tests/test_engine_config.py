"""Engine arguments come from the policy; GPU-only features fail at validation on this CPU, saying what to change."""

from __future__ import annotations

import pytest

from deployments.engine import engine_kwargs
from policies import schema
from policies.loader import PolicyError, load_policy, parse_policy

CPU_TIER = """
version: 1
tiers:
  reasoning:
    model: builtin:tiny-random
    pool: {{accelerator: {accelerator}}}
    engine: {{kv_cache_memory_gib: 0.1, {extra}}}
routing: {{chat_tier: null}}
"""


def tier_text(extra: str, accelerator: str = "cpu") -> str:
    return CPU_TIER.format(extra=extra, accelerator=accelerator)


def test_fp8_kv_on_a_cpu_without_avx512_is_refused_with_a_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "cpu_supports_fp8_kv", lambda: False)  # as on the project's AVX2-only machines
    with pytest.raises(PolicyError) as err:
        parse_policy(tier_text("kv_cache_dtype: fp8"), "p.yaml")
    problem = err.value.problems[0]
    assert problem.field == "tiers.reasoning.engine.kv_cache_dtype"
    assert "AVX-512" in problem.message and "kv_cache_dtype: auto" in problem.message


def test_fp8_kv_on_a_cpu_with_avx512_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "cpu_supports_fp8_kv", lambda: True)
    policy = parse_policy(tier_text("kv_cache_dtype: fp8"), "p.yaml")
    assert engine_kwargs(policy.tiers["reasoning"], "/m")["kv_cache_dtype"] == "fp8"


def test_kv_offload_on_a_cpu_tier_is_refused_with_a_fix() -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(tier_text("kv_offloading: {size_gib: 8}"), "p.yaml")
    assert "only from CUDA or XPU GPUs" in str(err.value) and "size_gib: 0" in str(err.value)


def test_gpu_tier_maps_fp8_offload_and_priority_to_vllm_arguments() -> None:
    policy = parse_policy(tier_text("kv_cache_dtype: fp8, kv_offloading: {size_gib: 24}", accelerator="gpu"))
    kwargs = engine_kwargs(policy.tiers["reasoning"], "/models/r1")
    assert kwargs["kv_cache_dtype"] == "fp8"
    assert (kwargs["kv_offloading_size"], kwargs["kv_offloading_backend"]) == (24, "native")
    assert kwargs["scheduling_policy"] == "priority"
    assert kwargs["kv_cache_memory_bytes"] == int(0.1 * (1 << 30))


def test_default_policy_cpu_engine_arguments() -> None:
    kwargs = engine_kwargs(load_policy().tiers["chat"], "/m")
    assert kwargs["dtype"] == "float32" and kwargs["enforce_eager"] is True
    assert "kv_offloading_size" not in kwargs and kwargs["kv_cache_dtype"] == "auto"
