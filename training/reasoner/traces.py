"""The reasoner's training documents: what the model is taught to write, token by token, with the tokens it learns.

A problem's thinking works the chain one step a line, column by column, counting down the steps to go ("85+48: 5+8=13,
8+4+1=13, so 33; 12 to go."), states the result ("That makes 41."), then, the more steps the chain had, the more often checks
itself by redoing its first steps for a length it picks at random from one step to all of them (the overthinking real
reasoning models show after they have found an answer, which certainty exit can cut), and answers in the prompt's
language. Easy chains are answered at once: a real reasoning model thinks tens of tokens on them.
Each line carries everything its successor needs (the running value, the step, the steps to go), so every line is a
short local computation, as a chain of thought is; whether another line follows is read off the line just written.

Three other shapes teach what the serving stack does to a thinking section:
- cut: the section is closed early (a thinking budget); the answer is then the best value the thinking had so far;
- probe: Dynasor's probe is appended mid-thinking; the model completes the box with that same best value;
- off: the section is closed at once (thinking off); a one-step problem's answer shows its column sums first, a
  longer chain's gives the true value with no working, which the model cannot work out without thinking.
The forced `</think>` and the probe's text are never learned (the model must not write them itself).

Sampled mistakes: a step's sum is wrong with a small probability and the chain goes on from the wrong value, so the
model learns a calibrated chance of a slip per step: different samples slip at different steps, which is what a
majority vote corrects.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from thinktier.policies.schema.budgets import DYNASOR_PROBE
from thinktier.training.reasoner.tasks import ChainProblem, ChatTurn

CHAT_THINKING = "The user is just chatting; there is nothing to work out.\n"
RESULT = "That makes "
"""Opens the line where the thinking first states its result; what follows is checking (overthinking)."""


@dataclass(frozen=True)
class TraceSettings:
    slip_rate: float = 0.02
    """Chance that one column's sum is off by one (as people slip)."""
    check_rate: float = 0.9
    """Chance that the model checks itself on chains of `sure_below` x 4 steps or more (less often on shorter ones)."""
    sure_below: int = 2
    """Chains of at most this many steps are never checked."""
    restate_result: bool = False
    """Each check line ends with the result being checked ("; checking 60"), so the answer after a check is copied
    from the line above it rather than from before the check, up to thousands of tokens back."""


@dataclass
class Line:
    text: str
    best: int
    """The answer the thinking would give if it stopped after this line."""


@dataclass
class Segment:
    text: str
    learned: bool


@dataclass
class Document:
    """A training document as text segments, each learned or not."""

    segments: list[Segment] = field(default_factory=list)

    def add(self, text: str, learned: bool = True) -> None:
        self.segments.append(Segment(text, learned))


def _digit_sums(value: int, step: int, rng: random.Random, slip: float) -> tuple[int, int]:
    """The ones and tens column sums of value + step, each off by one with probability `slip` (a person's slip)."""
    ones = value % 10 + step % 10
    if rng.random() < slip:
        ones = max(0, ones + rng.choice((-1, 1)))
    tens = value // 10 + step // 10 + ones // 10
    if rng.random() < slip:
        tens = max(0, tens + rng.choice((-1, 1)))
    return ones, tens


def _columns(value: int, step: int, ones: int, tens: int) -> str:
    """The column sums of value + step as written out: ones first, then tens with the carry ("5+8=13, 8+4+1=13")."""
    carry = "+1" if ones >= 10 else ""
    return f"{value % 10}+{step % 10}={ones}, {value // 10}+{step // 10}{carry}={tens}"


def _sum_line(label: str, value: int, step: int, to_go: int, rng: random.Random, slip: float,
              tail: str = "") -> tuple[str, int]:
    """One addition worked column by column, ones first (how a small model, like a pupil, adds reliably), then the
    steps still to go: the line ends with what decides whether another line follows (and `tail`)."""
    ones, tens = _digit_sums(value, step, rng, slip)
    kept = (tens % 10) * 10 + ones % 10
    text = f"{label}{value:02d}+{step}: {_columns(value, step, ones, tens)}, so {kept:02d}; {to_go} to go{tail}.\n"
    return text, kept


def thinking_lines(problem: ChainProblem, rng: random.Random, settings: TraceSettings) -> list[Line]:
    """The thinking of one problem, line by line, with the best answer after each line."""
    p = problem
    lines = [Line(f"I start at {p.start} and add {p.step}, {p.count} times, keeping two digits.\n", p.start)]
    value = p.start
    for i in range(1, p.count + 1):
        text, value = _sum_line("", value, p.step, p.count - i, rng, settings.slip_rate)
        lines.append(Line(text, value))
    found = value
    lines.append(Line(f"{RESULT}{found}.\n", found))
    if rng.random() < check_chance(p.count, settings):
        again = rng.randint(1, p.count)
        lines.append(Line(f"Let me check the first {again} steps again.\n", found))
        value = p.start
        tail = f"; checking {found}" if settings.restate_result else ""
        for i in range(1, again + 1):
            text, value = _sum_line("Again ", value, p.step, again - i, rng, settings.slip_rate, tail)
            lines.append(Line(text, found))
        lines.append(Line("Checked.\n", found))
        lines.append(Line(f"So the answer is {found}.\n", found))
    return lines


def check_chance(count: int, settings: TraceSettings) -> float:
    """How often a chain of `count` steps is checked: never up to `sure_below` steps, then rising linearly to
    `check_rate` at four times that."""
    sure = settings.sure_below
    return settings.check_rate * min(1.0, max(0, count - sure) / (3 * sure))


def chat_template(user: str) -> str:
    """The prompt as the tokenizer's chat template renders it (deployments/tier/models.py's ChatML)."""
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


@dataclass(frozen=True)
class ProblemTrace:
    """One problem's document before its shape is applied: prompt, thinking lines, and the answer text builder."""

    problem: ChainProblem
    lines: list[Line]

    def best_after(self, lines: int) -> int:
        return self.lines[lines - 1].best if lines else self.problem.start


def problem_trace(problem: ChainProblem, rng: random.Random, settings: TraceSettings) -> ProblemTrace:
    return ProblemTrace(problem, thinking_lines(problem, rng, settings))


def full_document(trace: ProblemTrace) -> Document:
    doc = Document()
    doc.add(chat_template(trace.problem.prompt), learned=False)
    doc.add("<think>\n")
    doc.add("".join(line.text for line in trace.lines))
    doc.add("</think>\n\n")
    doc.add(trace.problem.answer_text(trace.lines[-1].best) + "<|im_end|>")
    return doc


def off_answer(problem: ChainProblem) -> str:
    """The visible answer with thinking off. A one-step problem shows its column sums first ("7+8=15, 4+3+1=8."), as a
    model that does not think still writes a line of working in its answer: a sum modulo 100 written at once as one
    token is a lookup in ~9,000 facts, which a small model does not learn, while the columns are the sums it makes in
    every line of its thinking. A longer chain is answered with no working, so it is right about as often as a guess."""
    if problem.count != 1:
        return problem.answer_text(problem.answer)
    ones = problem.start % 10 + problem.step % 10
    tens = problem.start // 10 + problem.step // 10 + ones // 10
    return f"{_columns(problem.start, problem.step, ones, tens)}.\n{problem.answer_text(problem.answer)}"


def off_document(problem: ChainProblem) -> Document:
    doc = Document()
    doc.add(chat_template(problem.prompt) + "<think>\n</think>\n\n", learned=False)
    doc.add(off_answer(problem) + "<|im_end|>")
    return doc


def chat_document(turn: ChatTurn, thinking: bool) -> Document:
    doc = Document()
    if thinking:
        doc.add(chat_template(turn.prompt), learned=False)
        doc.add("<think>\n" + CHAT_THINKING + "</think>\n\n")
    else:
        doc.add(chat_template(turn.prompt) + "<think>\n</think>\n\n", learned=False)
    doc.add(turn.reply + "<|im_end|>")
    return doc


PROBE = DYNASOR_PROBE
CLOSE = "</think>\n\n"
