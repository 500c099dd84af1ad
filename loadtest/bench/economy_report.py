"""The economy bench's rows, what they sum to, the issue's aims met or missed, and the markdown report.

Pure: everything here works on rows the bench measured (or a test built), so it is tested without an engine.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from thinktier.deployments.tier.answers import Ballot, same_answer
from thinktier.loadtest.bench.economy_prompts import CLASSES
from thinktier.policies.schema import DifficultyClass

VOTERS = 5
VOTE_GAIN = 0.10
"""Aim: a vote of the first VOTERS samples is right on hard prompts at least this much more often than one sample (the
mean accuracy of all N samples: what one sample scores, with less noise than the first sample alone)."""
EXIT_SAVING = 0.25
EXIT_DROP = 0.01
"""Aim: certainty exit saves at least EXIT_SAVING of all thinking tokens, losing at most EXIT_DROP of accuracy."""
CONSENSUS_SAVING = 0.40
CONSENSUS_SAME = 0.90
"""Aim: early consensus saves at least CONSENSUS_SAVING of the vote's tokens, with the full vote's majority answer on
at least CONSENSUS_SAME of the prompts."""
_EPS = 1e-9
"""Shares are ratios of counts: 0.6 - 0.5 is 0.0999... in floating point, and still ten points."""


@dataclass
class PrefillRow:
    prompt_tokens: int
    computed: dict[str, int] = field(default_factory=dict)
    """Mode -> prompt tokens computed for N samples."""


@dataclass
class ConsensusRow:
    """One prompt: its N seeded samples run to their end, and the self-consistency request of the same samples that
    stops once `consensus` agree."""

    difficulty: DifficultyClass
    answers: list[str | None]
    """Each sample's answer, in sample order (sample j decodes with seed + j)."""
    correct: list[bool]
    """Whether each sample's answer is right."""
    tokens: list[int]
    """Each sample's thinking + answer tokens."""
    answer_early: str | None
    correct_early: bool
    tokens_early: int
    aborted: int
    answer_staged: str | None = None
    """The same vote with staged samples (`consensus` started, more only when needed); None where it was not run."""
    correct_staged: bool = False
    tokens_staged: int | None = None
    started_staged: int = 0
    seconds_early: float | None = None
    """Wall time of the vote with its samples together, and staged (one prompt at a time on an otherwise idle engine)."""
    seconds_staged: float | None = None


@dataclass
class CertaintyRow:
    """One prompt: one seeded decode with and without certainty probes (the probes do not change its samples)."""

    difficulty: DifficultyClass
    answer_plain: str | None
    answer_exit: str | None
    correct_plain: bool
    correct_exit: bool
    thinking_plain: int
    thinking_exit: int
    probes: int
    exited: bool


@dataclass(frozen=True)
class Aim:
    name: str
    target: str
    measured: str
    met: bool | None
    """None: not measured by this run (its phase not run, fewer samples than it needs, no hard prompts)."""


def vote_of_first(answers: Sequence[str | None], correct: Sequence[bool], n: int) -> tuple[str | None, bool]:
    """The majority answer of the first `n` samples and whether it is right: the samples' answers counted in sample
    order, as thinktier's vote counts them (equal values are one answer; a tie goes to the answer given first)."""
    ballot = Ballot()
    for index, answer in enumerate(answers[:n]):
        ballot.add(index, answer)
    leader = ballot.leader
    if leader is None:
        return None, False
    representative, voters = leader
    return representative, correct[voters[0]]


def majority_answers(answers: Sequence[str | None]) -> list[str]:
    """The answers with the most votes: one, or those tied for it (which one a vote returns depends on the order it
    counts the samples in: sample order here, the order they finish in thinktier's vote)."""
    ballot = Ballot()
    for index, answer in enumerate(answers):
        ballot.add(index, answer)
    counts = ballot.counts()
    return [answer for answer, votes in counts.items() if votes == max(counts.values())]


Row = TypeVar("Row", ConsensusRow, CertaintyRow)


def by_class(rows: Sequence[Row], value: Callable[[Row], float]) -> dict[str, float]:
    """The mean of `value` over the rows of each class present, and over all rows ("all")."""
    groups: dict[str, list[Row]] = {c: [r for r in rows if r.difficulty == c] for c in CLASSES}
    groups = {c: members for c, members in groups.items() if members} | {"all": list(rows)}
    return {c: statistics.mean(value(r) for r in members) for c, members in groups.items()}


def _vote_of_first_right(n: int) -> Callable[[ConsensusRow], float]:
    def right(row: ConsensusRow) -> float:
        return float(vote_of_first(row.answers, row.correct, n)[1])

    return right


def vote_accuracy(rows: Sequence[ConsensusRow]) -> dict[str, list[float]]:
    """Class -> [n - 1]: the accuracy of a majority vote of the first n samples, for n = 1..N."""
    per_n = [by_class(rows, _vote_of_first_right(n)) for n in range(1, len(rows[0].answers) + 1)]
    return {c: [accuracies[c] for accuracies in per_n] for c in per_n[0]}


def _agree(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and same_answer(a, b)


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags)


def _stopped(rows: Sequence[ConsensusRow], tokens: Sequence[int], answers: Sequence[str | None],
             correct: Sequence[bool]) -> dict[str, Any]:
    """One way of stopping the vote early, against all samples run to their end: each prompt's tokens, voted answer and
    whether it is right."""
    return {
        "tokens": sum(tokens), "tokens_saved_share": 1 - sum(tokens) / sum(sum(r.tokens) for r in rows),
        "per_prompt_saved_share_median": statistics.median(1 - t / sum(r.tokens) for r, t in zip(rows, tokens, strict=True)),
        "same_answer_share": _share([any(_agree(a, answer) for a in majority_answers(r.answers))
                                     for r, answer in zip(rows, answers, strict=True)]),
        "accuracy": _share(correct),
    }


def _consensus(rows: Sequence[ConsensusRow]) -> dict[str, Any]:
    full = [vote_of_first(r.answers, r.correct, len(r.answers)) for r in rows]
    early = _stopped(rows, [r.tokens_early for r in rows], [r.answer_early for r in rows], [r.correct_early for r in rows])
    out = {
        "tokens_full": sum(sum(r.tokens) for r in rows), "tokens_early": early.pop("tokens"),
        "accuracy_early": early.pop("accuracy"), **early,
        "samples_aborted_mean": statistics.mean(r.aborted for r in rows),
        "accuracy_full": _share([right for _, right in full]),
    }
    staged_tokens = [r.tokens_staged for r in rows]
    if all(t is not None for t in staged_tokens):
        staged = _stopped(rows, [t or 0 for t in staged_tokens], [r.answer_staged for r in rows],
                          [r.correct_staged for r in rows])
        staged["samples_started_mean"] = statistics.mean(r.started_staged for r in rows)
        seconds = [(r.seconds_early, r.seconds_staged) for r in rows]
        if all(early_s and staged_s for early_s, staged_s in seconds):
            staged |= {
                "seconds_early_median": statistics.median(early_s or 0.0 for early_s, _ in seconds),
                "seconds_median": statistics.median(staged_s or 0.0 for _, staged_s in seconds),
                "seconds_ratio_median": statistics.median((staged_s or 0.0) / (early_s or 1.0) for early_s, staged_s in seconds),
            }
        out["staged"] = staged
    return out


def _certainty(rows: Sequence[CertaintyRow]) -> dict[str, Any]:
    same = [r for r in rows if _agree(r.answer_plain, r.answer_exit)]
    plain_same, exit_same = sum(r.thinking_plain for r in same), sum(r.thinking_exit for r in same)
    plain, exit_ = sum(r.thinking_plain for r in rows), sum(r.thinking_exit for r in rows)
    return {
        "same_answer_share": len(same) / len(rows),
        "exited_share": _share([r.exited for r in rows]),
        "thinking_plain": plain,
        "thinking_exit": exit_,
        "thinking_saved_share": 1 - exit_ / plain if plain else 0.0,
        "thinking_saved_share_where_same": 1 - exit_same / plain_same if plain_same else 0.0,
        "probes_mean": statistics.mean(r.probes for r in rows),
        "accuracy_plain": _share([r.correct_plain for r in rows]),
        "accuracy_exit": _share([r.correct_exit for r in rows]),
    }


def summarize(prefill: list[PrefillRow], consensus: list[ConsensusRow], certainty: list[CertaintyRow]) -> dict[str, Any]:
    """Ratios, shares and medians over the prompts (this machine is noisy; counts of tokens are not)."""
    out: dict[str, Any] = {}
    if prefill:
        out["prefill_x_one_sample_median"] = {
            mode: statistics.median(r.computed[mode] / r.prompt_tokens for r in prefill) for mode in prefill[0].computed
        }
        out["prompt_tokens_median"] = statistics.median(r.prompt_tokens for r in prefill)
    if consensus:
        out["consensus"] = _consensus(consensus)
        out["votes"] = {
            "accuracy_of_first_n": vote_accuracy(consensus),
            "one_sample_accuracy": by_class(consensus, lambda r: _share(r.correct)),
        }
    if certainty:
        out["certainty"] = _certainty(certainty)
    return out


def _at_least(value: float, floor: float) -> bool:
    return value >= floor - _EPS


def _vote_aim(summary: dict[str, Any]) -> Aim:
    name, target = "voting", f"a vote of {VOTERS} beats one sample on hard prompts by at least {100 * VOTE_GAIN:.0f} points"
    votes = summary.get("votes")
    if votes is None or "hard" not in votes["one_sample_accuracy"] or len(votes["accuracy_of_first_n"]["hard"]) < VOTERS:
        return Aim(name, target, f"not measured (needs the consensus phase, hard prompts and {VOTERS} samples)", None)
    one, voted = votes["one_sample_accuracy"]["hard"], votes["accuracy_of_first_n"]["hard"][VOTERS - 1]
    gain = voted - one
    measured = f"hard: one sample {100 * one:.0f}%, vote of {VOTERS} {100 * voted:.0f}% ({100 * gain:+.0f} points)"
    return Aim(name, target, measured, _at_least(gain, VOTE_GAIN))


def _exit_aim(summary: dict[str, Any]) -> Aim:
    name = "certainty exit"
    target = f"at least {100 * EXIT_SAVING:.0f}% fewer thinking tokens, accuracy at most {100 * EXIT_DROP:.0f} point lower"
    ce = summary.get("certainty")
    if ce is None:
        return Aim(name, target, "not measured (the certainty phase was not run)", None)
    change = ce["accuracy_exit"] - ce["accuracy_plain"]
    measured = (f"{100 * ce['thinking_saved_share']:.0f}% fewer; accuracy {100 * ce['accuracy_plain']:.1f}% -> "
                f"{100 * ce['accuracy_exit']:.1f}% ({100 * change:+.1f} points)")
    return Aim(name, target, measured, _at_least(ce["thinking_saved_share"], EXIT_SAVING) and _at_least(change, -EXIT_DROP))


def _consensus_aim(summary: dict[str, Any], staged: bool = False) -> Aim:
    name = "early consensus, staged samples" if staged else "early consensus"
    target = (f"at least {100 * CONSENSUS_SAVING:.0f}% fewer tokens than the full vote, its majority answer on at least "
              f"{100 * CONSENSUS_SAME:.0f}% of prompts")
    c = summary.get("consensus")
    if c is not None and staged:
        c = c.get("staged")
    if c is None:
        return Aim(name, target, "not measured (the consensus phase was not run)", None)
    measured = f"{100 * c['tokens_saved_share']:.0f}% fewer; same answer on {100 * c['same_answer_share']:.0f}%"
    met = _at_least(c["tokens_saved_share"], CONSENSUS_SAVING) and _at_least(c["same_answer_share"], CONSENSUS_SAME)
    return Aim(name, target, measured, met)


def aims(summary: dict[str, Any]) -> list[Aim]:
    """The issue's three aims on the reasoner, each met, missed or not measured by this run; early consensus with the
    samples started together and staged."""
    return [_vote_aim(summary), _exit_aim(summary), _consensus_aim(summary), _consensus_aim(summary, staged=True)]


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[met]


def markdown(report: dict[str, Any], aim_rows: list[Aim]) -> str:
    """The results the README cites: the aims, then each measurement against its baseline."""
    s, summary = report["settings"], report["summary"]
    tokens = f" (median {summary['prompt_tokens_median']:.0f} prompt tokens)" if "prompt_tokens_median" in summary else ""
    lines = [f"# Reasoning economy on `{report['model']}` ({report['device']})", "",
             f"Command: `{report['command']}`  ", f"{report['prompts']}{tokens}; wall time {report['wall_s']:.0f} s.", "",
             "## Aims", "", "| aim | target | measured | |", "|---|---|---|---|"]
    lines += [f"| {a.name} | {a.target} | {a.measured} | {_verdict(a.met)} |" for a in aim_rows] + [""]
    if "prefill_x_one_sample_median" in summary:
        lines += _prefill_lines(s, summary["prefill_x_one_sample_median"])
    if "votes" in summary:
        lines += _vote_lines(s, summary["votes"])
    if "consensus" in summary:
        lines += _consensus_lines(s, summary["consensus"])
    if "certainty" in summary:
        lines += _certainty_lines(s, report["certainty_temperature"], summary["certainty"])
    return "\n".join(lines)


def _prefill_lines(s: dict[str, Any], px: dict[str, float]) -> list[str]:
    return [f"## Prefill of N = {s['samples']} samples (prompt tokens computed, in units of one sample's prefill)",
            "", "| mode | median x one sample | aim |", "|---|---|---|",
            f"| thinktier samples (sent together, one cache salt) | {px['shared']:.2f}x | under 1.5x |",
            f"| one vLLM request with n={s['samples']} | {px['vllm_n']:.2f}x | - |",
            f"| {s['samples']} separate requests (nothing shared) | {px['separate']:.2f}x | - |", ""]


def _vote_lines(s: dict[str, Any], votes: dict[str, Any]) -> list[str]:
    accuracy, one = votes["accuracy_of_first_n"], votes["one_sample_accuracy"]
    classes = list(accuracy)
    lines = [f"## Accuracy of a majority vote of the first n of N = {s['samples']} samples (temperature {s['temperature']})",
             "", "| samples voting | " + " | ".join(classes) + " |", "|---" * (len(classes) + 1) + "|"]
    lines += [f"| {n} | " + " | ".join(f"{100 * accuracy[c][n - 1]:.0f}%" for c in classes) + " |"
              for n in range(1, len(accuracy["all"]) + 1)]
    lines += ["| one sample, mean of the N | " + " | ".join(f"{100 * one[c]:.0f}%" for c in classes) + " |", "",
              "Each prompt's samples are decoded once, to their end (sample j with seed + j); the vote of the first n is "
              "counted over their answers.", ""]
    return lines


def _consensus_lines(s: dict[str, Any], c: dict[str, Any]) -> list[str]:
    st = c.get("staged")

    def staged(cell: str) -> str:
        return f" {cell} |" if st else ""

    def saved(tokens: int, share: float, median: float) -> str:
        return f"{tokens:,} (**{100 * share:.0f}% fewer**; median per prompt {100 * median:.0f}%)"

    lines = [f"## Early consensus: N = {s['samples']}, stop at {s['consensus']} agreeing (temperature {s['temperature']})",
             "", "| | all samples to the end | early consensus, samples together |" + staged("staged samples"),
             "|---|---|---|" + staged("---"),
             f"| tokens (thinking + answer, all samples) | {c['tokens_full']:,} | "
             f"{saved(c['tokens_early'], c['tokens_saved_share'], c['per_prompt_saved_share_median'])} |"
             + (staged(saved(st["tokens"], st["tokens_saved_share"], st["per_prompt_saved_share_median"])) if st else ""),
             f"| voted answer the same | - | **{100 * c['same_answer_share']:.0f}%** of prompts |"
             + (staged(f"**{100 * st['same_answer_share']:.0f}%** of prompts") if st else ""),
             f"| voted answer correct | {100 * c['accuracy_full']:.0f}% | {100 * c['accuracy_early']:.0f}% |"
             + (staged(f"{100 * st['accuracy']:.0f}%") if st else ""),
             f"| samples started per prompt (mean) | {s['samples']} | {s['samples']} |"
             + (staged(f"{st['samples_started_mean']:.1f}") if st else ""),
             f"| samples aborted per prompt (mean) | 0 | {c['samples_aborted_mean']:.1f} |" + staged("-")]
    if st and "seconds_median" in st:
        lines.append(f"| wall time per vote, median (one prompt at a time) | - | {st['seconds_early_median']:.1f} s |"
                     f" {st['seconds_median']:.1f} s (median ratio {st['seconds_ratio_median']:.2f}x) |")
    lines.append("")
    if st:
        lines += ["Staged samples: the first `consensus` samples start together, and another only when those still "
                  "decoding can no longer bring the leading answer to `consensus` (`budgets.<effort>.staged`); each "
                  "sample j decodes with seed + j either way, so the three columns vote over the same samples.", ""]
    return lines


def _certainty_lines(s: dict[str, Any], temperature: float, ce: dict[str, Any]) -> list[str]:
    decode = "greedy" if temperature == 0.0 else f"temperature {temperature}, the same seed with and without probes"
    return [f"## Certainty exit: probe every {s['interval_tokens']} thinking tokens, stop at {s['agree']} agreeing "
            f"({decode})", "", "| | no exit | certainty exit |", "|---|---|---|",
            f"| thinking tokens, all prompts | {ce['thinking_plain']:,} | {ce['thinking_exit']:,} "
            f"(**{100 * ce['thinking_saved_share']:.0f}% fewer**) |",
            f"| answer correct | {100 * ce['accuracy_plain']:.1f}% | {100 * ce['accuracy_exit']:.1f}% |",
            f"| thinking saved where the answer is unchanged | - | {100 * ce['thinking_saved_share_where_same']:.0f}% |",
            f"| answer unchanged | - | {100 * ce['same_answer_share']:.0f}% of prompts |",
            f"| decodes ended by the probes | - | {100 * ce['exited_share']:.0f}% (mean {ce['probes_mean']:.1f} probes) |",
            ""]
