"""What the benches read of the machine they run on: nvidia-smi queries, the CPU's name, and the GPU memory an
engine leaves behind when it shuts down."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path


def nvidia_smi(query: str, *fields: str) -> list[list[str]]:
    """CSV rows of an nvidia-smi query (e.g. 'query-gpu'); none where nvidia-smi is missing or fails."""
    if shutil.which("nvidia-smi") is None:
        return []
    args = ["nvidia-smi", f"--{query}={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return []
    if done.returncode != 0:
        return []
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def first_gpu(field: str) -> str:
    """One `--query-gpu` field of the first GPU; empty where there is no NVIDIA driver."""
    rows = nvidia_smi("query-gpu", field)
    return rows[0][0] if rows else ""


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo; empty where there is none."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.partition(":")[2].strip() for line in lines if line.startswith("model name")), "")


def device_name(on_gpu: bool) -> str:
    """The device a tier runs on: the first GPU's name, or on CPU tiers the CPU's."""
    return first_gpu("name") if on_gpu else cpu_name()


def _gpu_memory_used_mib() -> int:
    used = first_gpu("memory.used")
    return int(used) if used else -1


def wait_gpu_free(limit_mib: int = 2048, timeout_s: float = 60) -> int:
    """After an engine shuts down its worker process lets go of GPU memory; wait for that before the next."""
    end = time.monotonic() + timeout_s
    used = _gpu_memory_used_mib()
    while used > limit_mib and time.monotonic() < end:
        time.sleep(1)
        used = _gpu_memory_used_mib()
    return used
