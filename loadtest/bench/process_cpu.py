"""Per-process CPU from /proc, each process classed by its title (Ingress, proxy, tier replicas, engine cores, the
load generator, the rest), so that a full-stack run shows whether those processes, not the policy, were the limit."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

CPU_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ingress", re.compile(r"ServeReplica:[^:\s]*:Ingress\b")),
    ("proxy", re.compile(r"ProxyActor|/haproxy\b")),
    ("tier", re.compile(r"ServeReplica:[^:\s]*:tier-")),
    ("engine", re.compile(r"EngineCore")),
    ("loadgen", re.compile(r"\bloadtest run\b")),
)
"""Process classes by title, first match wins. Ray and vLLM set process titles such as
`ray::ServeReplica:thinktier:Ingress.handle_request_with_rejection`, `ray::ProxyActor` and `VLLM::EngineCore`.
Why by class: in the 2026-11-30 pilot the HTTP path stalled at 4 req/s while the engines idled, with the Ingress replica
at 190-270% CPU and Serve's ProxyActor at 100-115% (one event loop); a run measures the policy only when those
processes are not the limit."""
OTHER = "other"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ClassCPU(BaseModel):
    """One process class in one sample interval; 100 = one core."""

    percent: float
    """All the class's processes together."""
    busiest: float
    """Its busiest single process (a saturated event loop shows as ~100 here)."""
    processes: int


class TopProcess(BaseModel):
    pid: int
    cpu_class: str
    title: str
    percent: float


@dataclass(frozen=True)
class ProcCPU:
    """A process's CPU time so far (user + system, all its threads)."""

    pid: int
    cpu_s: float
    title: str


ProcKey = tuple[int, int]
"""(pid, start time in clock ticks): a reused pid is another process."""


def parse_stat(stat: str, hz: float) -> tuple[str, int, float]:
    """(comm, start time in ticks, utime + stime in seconds) from a /proc/PID/stat line.
    comm may hold spaces and parentheses, so the fields are counted from its closing parenthesis."""
    comm = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2 :].split()
    # fields[0] is field 3 (state): utime, stime and starttime are fields 14, 15 and 22
    return comm, int(fields[19]), (int(fields[11]) + int(fields[12])) / hz


def process_title(cmdline: bytes, comm: str) -> str:
    """The command line as `ps` shows it (Ray and vLLM rewrite it to a title); comm for kernel threads."""
    return cmdline.replace(b"\0", b" ").decode(errors="replace").strip() or comm


def read_processes(proc: Path = Path("/proc"), hz: float = CLOCK_TICKS) -> dict[ProcKey, ProcCPU]:
    out: dict[ProcKey, ProcCPU] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm, start, cpu_s = parse_stat((entry / "stat").read_text(), hz)
            title = process_title((entry / "cmdline").read_bytes(), comm)
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not readable
            continue
        out[(int(entry.name), start)] = ProcCPU(int(entry.name), cpu_s, title)
    return out


def classify(title: str) -> str:
    return next((name for name, pattern in CPU_CLASSES if pattern.search(title)), OTHER)


def process_loads(before: dict[ProcKey, ProcCPU], after: dict[ProcKey, ProcCPU], dt_s: float) -> list[TopProcess]:
    """CPU % of every process alive at both readings, over the `dt_s` seconds between them, busiest first.
    A title read later wins: a Ray worker takes its actor's title after it starts."""
    loads = [
        TopProcess(
            pid=p.pid, cpu_class=classify(p.title), title=p.title[:120], percent=(p.cpu_s - before[key].cpu_s) / dt_s * 100
        )
        for key, p in after.items()
        if key in before
    ]
    return sorted(loads, key=lambda p: -p.percent)


def by_class(loads: Sequence[TopProcess]) -> dict[str, ClassCPU]:
    classes: dict[str, list[float]] = {}
    for p in loads:
        classes.setdefault(p.cpu_class, []).append(p.percent)
    return {c: ClassCPU(percent=sum(v), busiest=max(v), processes=len(v)) for c, v in sorted(classes.items())}
