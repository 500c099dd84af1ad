"""Argument types shared by several commands."""

from __future__ import annotations

import argparse
from pathlib import Path


def policy_setting(text: str) -> tuple[str, str]:
    """`--set KNOB=VALUE`: a dotted policy field and its new value (JSON, or a bare word)."""
    knob, sep, value = text.partition("=")
    if not sep or not knob or not value:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KNOB=VALUE, e.g. tiers.reasoning.replicas.max=1000")
    return knob, value


def engine_timing_error(step_profile: Path | None, serving_overhead_us: float | None) -> str | None:
    """What is wrong with `--step-profile` and `--serving-overhead-us` (the simulator's engine timing), if anything."""
    if serving_overhead_us is not None and serving_overhead_us < 0:
        return f"--serving-overhead-us: {serving_overhead_us:g} is negative; give 0 or more microseconds"
    if step_profile is not None and not step_profile.is_file():
        return f"--step-profile: no such file {step_profile}"
    return None
