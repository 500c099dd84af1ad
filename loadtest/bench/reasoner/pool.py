"""Pools several `thinktier bench reasoner` runs of one model (other seeds) into one report, each aim over all their rows.

One run draws 30 problems per class: one problem is 3.3 points, so an aim near its line is met or missed with the seed.
The pooled rows are the figure to judge by; each run's aims, judged again from its rows by today's rules, stay beside
them in the pooled README.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from thinktier.loadtest.bench.reasoner.behaviours import Row
from thinktier.loadtest.bench.reasoner.report import aims, budget_plot, markdown, summarize
from thinktier.loadtest.bench.reasoner.run import hard_thinking_floor
from thinktier.training.reasoner.sizes import SIZES


class PoolError(ValueError):
    """The runs cannot be pooled: a folder without results.json, or runs of other models or sizes."""


def _read(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "results.json"
    if not path.is_file():
        raise PoolError(f"{path}: no such file (give folders that `thinktier bench reasoner --out` wrote)")
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return report


def pool(run_dirs: Sequence[Path], out_dir: Path, command: str) -> dict[str, Any]:
    """Writes results.json (summary and aims of the pooled rows, each run's aims), README.md and the budget plot."""
    reports = [_read(d) for d in run_dirs]
    kinds = {(r["model"], r["size"]) for r in reports}
    if len(kinds) != 1:
        raise PoolError("runs of different models or sizes cannot be pooled: "
                        + ", ".join(f"{d}: {r['model']} ({r['size']})" for d, r in zip(run_dirs, reports, strict=True)))
    (model, size), = kinds
    floor = hard_thinking_floor(SIZES[size])
    run_rows = [[Row(**row) for row in r["rows"]] for r in reports]
    summary = summarize([row for rows in run_rows for row in rows])
    aim_rows = aims(summary, floor)
    runs = [{"run": str(d), "seed": r["settings"]["seed"], "device": r["device"], "command": r["command"],
             "aims": [asdict(a) for a in aims(summarize(rows), floor)]}
            for d, r, rows in zip(run_dirs, reports, run_rows, strict=True)]
    report = {
        "command": command, "device": "; ".join(sorted({r["device"] for r in reports})), "model": model, "size": size,
        "difficulty": reports[0]["difficulty"],
        "settings": f"{len(reports)} runs pooled, seeds {', '.join(str(r['seed']) for r in runs)}",
        "wall_s": sum(r["wall_s"] for r in reports), "summary": summary, "aims": [asdict(a) for a in aim_rows],
        "runs": runs,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    budget_plot(summary, out_dir / "budget_accuracy.png", f"{model}: accuracy by thinking budget, {report['settings']}")
    (out_dir / "README.md").write_text(markdown(report, aim_rows) + _per_run(runs), encoding="utf-8")
    return report


def _per_run(runs: Sequence[dict[str, Any]]) -> str:
    names = [a["name"] for a in runs[0]["aims"]]
    lines = ["", "## Each run alone", "", "| behaviour | " + " | ".join(f"seed {r['seed']}" for r in runs) + " |",
             "|---|" + "---|" * len(runs)]
    for name in names:
        cells = []
        for r in runs:
            aim = next((a for a in r["aims"] if a["name"] == name), None)
            cells.append("-" if aim is None else f"{aim['measured']} ({'met' if aim['met'] else '**missed**'})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Runs: " + ", ".join(f"`{r['run']}`" for r in runs) + "."]
    return "\n".join(lines) + "\n"
