"""The reasoner bench's figures, aims and report: results.json, README.md and the budget-accuracy plot."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thinktier.loadtest.bench.reasoner.behaviours import Row

CLASSES = ("easy", "medium", "hard")
CHANCE = 0.01
"""Answers are numbers 0-99: a guess is right one time in a hundred."""


def _share(rows: Sequence[Row], test: Callable[[Row], bool]) -> float | None:
    return sum(map(test, rows)) / len(rows) if rows else None


def _quantiles(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p10": pick(0.1), "median": statistics.median(ordered), "p90": pick(0.9)}


def summarize(rows: Sequence[Row]) -> dict[str, Any]:
    by = lambda phase, cls: [r for r in rows if r.phase == phase and r.difficulty == cls]  # noqa: E731
    out: dict[str, Any] = {}
    if any(r.phase == "full" for r in rows):
        out["full"] = {cls: {
            "n": len(by("full", cls)),
            "accuracy": _share(by("full", cls), lambda r: r.correct),
            "thinking_tokens": _quantiles([r.thinking_tokens for r in by("full", cls)]),
            "overthinking_tokens": _quantiles([r.overthinking_tokens for r in by("full", cls)
                                               if r.overthinking_tokens is not None]),
            "overthinking_share": _quantiles([r.overthinking_tokens / r.thinking_tokens for r in by("full", cls)
                                              if r.overthinking_tokens is not None and r.thinking_tokens]),
        } for cls in CLASSES}
    if any(r.phase == "off" for r in rows):
        off = [r for r in rows if r.phase == "off"]
        out["off"] = {cls: {"n": len(by("off", cls)), "accuracy": _share(by("off", cls), lambda r: r.correct)}
                      for cls in CLASSES}
        ones = [r for r in off if r.count == 1]
        out["off"]["one_step"] = {"n": len(ones), "accuracy": _share(ones, lambda r: r.correct)}
    budget = [r for r in rows if r.phase == "budget"]
    if budget:
        budgets = sorted({r.budget for r in budget})
        out["budget"] = {cls: {str(b): _share([r for r in by("budget", cls) if r.budget == b], lambda r: r.correct)
                               for b in budgets} for cls in CLASSES}
        forced = [r for r in budget if r.budget_forced]
        out["budget_forced"] = {"n": len(forced), "answered": _share(forced, lambda r: r.answered)}
    if any(r.phase == "vote" for r in rows):
        out["vote"] = {cls: {
            "n": len(by("vote", cls)),
            "voted_accuracy": _share(by("vote", cls), lambda r: r.correct),
            "sample_accuracy": statistics.mean(r.sample_accuracy for r in by("vote", cls) if r.sample_accuracy is not None)
            if any(r.sample_accuracy is not None for r in by("vote", cls)) else None,
        } for cls in CLASSES}
    return out


@dataclass(frozen=True)
class Aim:
    name: str
    wanted: str
    measured: str
    met: bool | None
    """None: the phase that measures it did not run."""


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _points(share: float | None) -> float:
    """A share in percentage points, rounded past float noise: 1.0 - 0.9 is 0.0999..., which is 10 points."""
    return round(100 * (share or 0), 6)


def aims(summary: dict[str, Any], hard_thinking_floor: int) -> list[Aim]:
    out: list[Aim] = []
    full, off, vote = summary.get("full"), summary.get("off"), summary.get("vote")
    if full:
        easy_t, hard_t = full["easy"]["thinking_tokens"], full["hard"]["thinking_tokens"]
        out.append(Aim("thinking grows with difficulty", f"easy median < 100 tokens, hard median >= {hard_thinking_floor}",
                       f"easy {easy_t['median']:.0f}, medium {full['medium']['thinking_tokens']['median']:.0f}, "
                       f"hard {hard_t['median']:.0f}",
                       easy_t["median"] < 100 and hard_t["median"] >= hard_thinking_floor))
        out.append(Aim("accuracy with full thinking (T=0.6)", "easy >= 95%, hard >= 80%",
                       f"easy {_pct(full['easy']['accuracy'])}, medium {_pct(full['medium']['accuracy'])}, "
                       f"hard {_pct(full['hard']['accuracy'])}",
                       _points(full["easy"]["accuracy"]) >= 95 and _points(full["hard"]["accuracy"]) >= 80))
        spread = full["hard"]["overthinking_tokens"]
        out.append(Aim("checks its work for a varying length", "hard: overthinking p90 > 2 x p10",
                       "-" if spread is None else f"hard p10 {spread['p10']:.0f}, median {spread['median']:.0f}, "
                       f"p90 {spread['p90']:.0f} tokens", spread is not None and spread["p90"] > 2 * max(1, spread["p10"])))
    if off:
        out.append(Aim("thinking off", "one-step problems right (>= 95%), hard near chance (<= 5%)",
                       f"one-step {_pct(off['one_step']['accuracy'])}, easy {_pct(off['easy']['accuracy'])}, "
                       f"hard {_pct(off['hard']['accuracy'])}",
                       _points(off["one_step"]["accuracy"]) >= 95 and _points(off["hard"]["accuracy"]) <= 5))
    if "budget" in summary:
        forced = summary["budget_forced"]
        curve = summary["budget"]["hard"]
        values = [v for v in curve.values() if v is not None]
        out.append(Aim("a cut thinking still answers; accuracy falls with the budget",
                       "every forced end answers; hard accuracy at the smallest budget < at the largest",
                       f"{_pct(forced['answered'])} of {forced['n']} forced ends answered; hard "
                       + " -> ".join(f"{b}: {_pct(v)}" for b, v in curve.items()),
                       forced["answered"] == 1 and len(values) > 1 and values[0] < values[-1]))
    if vote:
        hard = vote["hard"]
        gain = None if hard["voted_accuracy"] is None or hard["sample_accuracy"] is None else (
            hard["voted_accuracy"] - hard["sample_accuracy"])
        out.append(Aim("a vote of 5 corrects sampled mistakes", "hard: voted accuracy >= one sample's + 10 points",
                       f"hard: one sample {_pct(hard['sample_accuracy'])}, voted {_pct(hard['voted_accuracy'])}",
                       gain is not None and _points(gain) >= 10))
    return out


def budget_plot(summary: dict[str, Any], path: Path, title: str) -> Path | None:
    if "budget" not in summary:
        return None
    import matplotlib.pyplot as plt

    from thinktier.loadtest.plots import save_figure

    fig, ax = plt.subplots(figsize=(7, 4))
    for cls in CLASSES:
        curve = summary["budget"][cls]
        points = [(int(b), v) for b, v in curve.items() if v is not None]
        ax.plot([b for b, _ in points], [100 * v for _, v in points], marker="o", label=cls)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("thinking budget (tokens)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def markdown(report: dict[str, Any], aim_rows: Sequence[Aim]) -> str:
    s = report["summary"]
    lines = [f"# Reasoner behaviours: {report['model']}", "", f"Command: `{report['command']}`", "",
             f"Device: {report['device']}; wall time {report['wall_s']:.0f} s; settings: {report['settings']}", "",
             "## Aims", "", "| behaviour | aim | measured | met |", "|---|---|---|---|"]
    lines += [f"| {a.name} | {a.wanted} | {a.measured} | {'-' if a.met is None else ('yes' if a.met else '**no**')} |"
              for a in aim_rows]
    if "full" in s:
        lines += ["", "## Full thinking (one sample, temperature 0.6)", "",
                  "| class | n | accuracy | thinking tokens p10 / median / p90 | overthinking tokens p10 / median / p90 |",
                  "|---|---|---|---|---|"]
        for cls in CLASSES:
            f = s["full"][cls]
            t, o = f["thinking_tokens"], f["overthinking_tokens"]
            over = "-" if o is None else f"{o['p10']:.0f} / {o['median']:.0f} / {o['p90']:.0f}"
            lines.append(f"| {cls} | {f['n']} | {_pct(f['accuracy'])} | {t['p10']:.0f} / {t['median']:.0f} / "
                         f"{t['p90']:.0f} | {over} |")
    if "off" in s:
        lines += ["", "## Thinking off (greedy)", "", "| class | n | accuracy |", "|---|---|---|"]
        lines += [f"| {cls} | {s['off'][cls]['n']} | {_pct(s['off'][cls]['accuracy'])} |"
                  for cls in (*CLASSES, "one_step")]
        lines.append(f"\nChance is {_pct(CHANCE)} (answers 0-99).")
    if "budget" in s:
        budgets = list(s["budget"]["easy"])
        lines += ["", "## Accuracy by thinking budget", "", "![budget-accuracy curve](budget_accuracy.png)", "",
                  "| class | " + " | ".join(budgets) + " |", "|---|" + "---|" * len(budgets)]
        lines += [f"| {cls} | " + " | ".join(_pct(s["budget"][cls][b]) for b in budgets) + " |" for cls in CLASSES]
    if "vote" in s:
        lines += ["", "## Self-consistency: a vote of 5", "", "| class | n | one sample | voted |", "|---|---|---|---|"]
        lines += [f"| {cls} | {v['n']} | {_pct(v['sample_accuracy'])} | {_pct(v['voted_accuracy'])} |"
                  for cls, v in s["vote"].items()]
    return "\n".join(lines) + "\n"
