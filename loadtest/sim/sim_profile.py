"""What one simulated replica's hardware can do: decode step time, prefill cost and KV capacity, from a measured
step profile (`loadtest/results/gpu/h200_step_profile.json`, `loadtest/results/cpu/cpu_step_profile.json`).

Step-time model (fitted by `thinktier.loadtest.bench.gpu.gpu_step_profile.fit_step_profile` from the profile's points):
    step_s = a_s + b_s_per_seq * batch + c_s_per_seq_token * batch * context
`a` is reading the weights once per step, `b` the per-sequence compute, `c` reading each sequence's KV. A prompt
token in a prefill goes through the weights like one more decoding sequence, so its cost is taken as `b` (the
profile may give `prefill_s_per_token` instead).

The profile measures the bare engine. Served through the whole stack, every running sequence also costs the engine
process CPU time each step (per-request logits processing such as the thinking budget, output processing), which
the full-stack GPU runs showed as engine processes at 100 % CPU with the GPU partly idle. The profile's
`serving.overhead_s_per_seq`, fitted from a full-stack run, adds that cost per sequence and step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from thinktier.policies.schema import Tier

GIB = 1024**3
RESULTS = Path(__file__).resolve().parents[1] / "results"
DEFAULT_PROFILES = {"gpu": RESULTS / "gpu" / "h200_step_profile.json", "cpu": RESULTS / "cpu" / "cpu_step_profile.json"}
"""The profile a tier's pool gets unless one is named."""
DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "auto": 2, "bfloat16": 2, "float16": 2, "float32": 4}
"""Bytes per value; KV dtype 'auto' stores KV in the weights' dtype (and dtype 'auto' is 16-bit for these models)."""


@dataclass(frozen=True)
class Geometry:
    """The model a profile was measured on: what its KV cache and weights take."""

    layers: int
    kv_heads: int
    head_dim: int
    weights_gib: float

    def kv_bytes_per_token(self, kv_cache_dtype: str, dtype: str = "auto") -> int:
        stored = dtype if kv_cache_dtype == "auto" else kv_cache_dtype
        return 2 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES[stored]


@dataclass(frozen=True)
class HardwareProfile:
    """One replica's speed and memory on one kind of device with one model."""

    name: str
    a_s: float
    b_s_per_seq: float
    c_s_per_seq_token: float
    prefill_s_per_token: float
    geometry: Geometry
    device_memory_gib: float
    """Memory of one device, for KV sized by gpu_memory_utilization."""
    overhead_s_per_seq: float = 0.0
    """The serving stack's extra cost per running sequence and step (see the module docstring)."""

    def device_s(self, batch: int, mean_context: float) -> float:
        """The device's share of one decode step: the bare engine's measured step."""
        return self.a_s + batch * (self.b_s_per_seq + self.c_s_per_seq_token * mean_context)

    def step_s(self, batch: int, mean_context: float, device_slowdown: float = 1.0) -> float:
        """One decode step of `batch` sequences whose contexts average `mean_context` tokens; the device's share
        stretched by `device_slowdown` when other engines use the same device."""
        return self.device_s(batch, mean_context) * device_slowdown + batch * self.overhead_s_per_seq

    def device_duty(self, batch: int, mean_context: float) -> float:
        """Share of a busy engine's time that its device computes (the rest is the serving overhead, on the CPU)."""
        return self.device_s(batch, mean_context) / self.step_s(batch, mean_context) if batch else 0.0

    def kv_tokens(self, tier: Tier) -> int:
        """KV cache tokens of one replica: the policy's KV size, or what gpu_memory_utilization leaves after the
        weights (activation memory ignored)."""
        per_token = self.geometry.kv_bytes_per_token(tier.engine.kv_cache_dtype, tier.engine.dtype)
        if tier.engine.kv_cache_memory_gib is not None:
            return int(tier.engine.kv_cache_memory_gib * GIB // per_token)
        share = tier.engine.gpu_memory_utilization * self.device_memory_gib - self.geometry.weights_gib
        return max(0, int(share * GIB // per_token))

    @classmethod
    def load(cls, path: Path) -> HardwareProfile:
        data = json.loads(path.read_text())
        fit = data["fit"]
        geometry = data.get("geometry")
        if geometry is None:
            raise ValueError(f"{path}: no 'geometry' (layers, kv_heads, head_dim, weights_gib of the profiled model)")
        return cls(
            name=path.stem,
            a_s=fit["a_s"],
            b_s_per_seq=fit["b_s_per_seq"],
            c_s_per_seq_token=fit["c_s_per_seq_token"],
            prefill_s_per_token=data.get("prefill_s_per_token", fit["b_s_per_seq"]),
            geometry=Geometry(**geometry),
            device_memory_gib=data.get("device_memory_gib", 0.0),
            overhead_s_per_seq=data.get("serving", {}).get("overhead_s_per_seq", 0.0),
        )


def gpu_tier_profiles(tiers: dict[str, Tier], profile: Path | None) -> dict[str, Path] | None:
    """`profile` for every GPU tier of `tiers` (`PlanInputs.profiles`); None (each pool's default) without one."""
    return None if profile is None else {name: profile for name, tier in tiers.items() if tier.pool.accelerator == "gpu"}


def profile_for(tier: Tier, override: Path | None = None) -> HardwareProfile:
    return HardwareProfile.load(override or DEFAULT_PROFILES[tier.pool.accelerator])
