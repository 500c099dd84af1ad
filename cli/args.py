"""Argument types shared by several commands."""

from __future__ import annotations

import argparse


def policy_setting(text: str) -> tuple[str, str]:
    """`--set KNOB=VALUE`: a dotted policy field and its new value (JSON, or a bare word)."""
    knob, sep, value = text.partition("=")
    if not sep or not knob or not value:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KNOB=VALUE, e.g. tiers.reasoning.replicas.max=1000")
    return knob, value
