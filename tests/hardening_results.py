"""What the hardening tests tried against the running service and what they measured, for the table in
loadtest/results/hardening/: inputs and faults, requests lost without an explicit error, time to recover.

Tests record figures here and assert on behaviour alone (no timed assertions); `pytest --hardening-results FILE`
writes the figures of the tests that ran as JSON. Rows with the same kind and name (one per parametrized case) add up.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

Kind = Literal["input", "fault"]


@dataclass
class Row:
    kind: Kind
    what: str
    tried: int
    """Requests (inputs) or injections (faults)."""
    outcomes: dict[str, int]
    """What came back, by name (an HTTP status, `sse_error`, `served`, ...), counted."""
    lost_without_error: int
    """Requests that ended with neither a complete answer nor an explicit error (an OpenAI error body or an SSE error
    event): the figure the issue aims at zero."""
    recover_s: float | None
    """Seconds from the fault (or the last answer) until the service was whole again; None where nothing needed it."""
    recovered_when: str
    """What `recover_s` waited for."""
    tests: list[str] = field(default_factory=list)


class HardeningResults:
    def __init__(self) -> None:
        self.rows: dict[tuple[Kind, str], Row] = {}

    def add(self, test: str, row: Row) -> None:
        known = self.rows.get((row.kind, row.what))
        if known is None:
            self.rows[(row.kind, row.what)] = row
            row.tests = [test]
            return
        known.tried += row.tried
        known.outcomes = dict(Counter(known.outcomes) + Counter(row.outcomes))
        known.lost_without_error += row.lost_without_error
        times = [t for t in (known.recover_s, row.recover_s) if t is not None]
        known.recover_s = max(times) if times else None
        if test not in known.tests:
            known.tests.append(test)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = sorted(self.rows.values(), key=lambda r: (r.kind != "input", r.what))
        document = {
            "command": shlex.join(["pytest", *sys.argv[1:]]),
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()},
            "rows": [asdict(r) for r in rows],
            "lost_without_error": sum(r.lost_without_error for r in rows),
        }
        path.write_text(json.dumps(document, indent=2) + "\n")


@dataclass(frozen=True)
class Recorder:
    """The `record` fixture: one test's rows."""

    results: HardeningResults
    test: str

    def __call__(
        self, kind: Kind, what: str, tried: int, outcomes: dict[str, int], lost_without_error: int = 0,
        recover_s: float | None = None, recovered_when: str = "",
    ) -> None:
        self.results.add(self.test, Row(kind, what, tried, dict(outcomes), lost_without_error,
                                        None if recover_s is None else round(recover_s, 2), recovered_when))
