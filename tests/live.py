"""Helpers of the tests that edit the running service's policy and read its state over HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml


def eventually(check: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def merged(base: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    """`base` with `edits` laid over it, sections merged key by key."""
    out = dict(base)
    for key, value in edits.items():
        inner = base.get(key)
        out[key] = merged(inner, value) if isinstance(value, dict) and isinstance(inner, dict) else value
    return out


@contextmanager
def policy_edit(path: Path, edits: dict[str, Any], applied: Callable[[], bool]) -> Iterator[None]:
    """The served policy with `edits` merged in until the block ends, then the original again. The watcher applies a
    file once two polls read the same content, so `applied` is polled until it holds."""
    original = path.read_text()
    path.write_text(yaml.safe_dump(merged(yaml.safe_load(original), edits)))
    try:
        eventually(applied, f"the policy edit {edits} never applied")
        yield
    finally:
        path.write_text(original)


def in_flight(url: str, headers: dict[str, str] | None = None) -> dict[str, float]:
    """thinktier_tenant_requests_in_flight by tenant, from /metrics."""
    text = httpx.get(f"{url}/metrics", headers=headers or {}, timeout=30).text
    prefix = "thinktier_tenant_requests_in_flight{tenant="
    return {ln.split('"')[1]: float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(prefix)}
