"""Hand-written training prompts for the ways users write that the problem sets lack (issue 33).

The problem sets teach what a GSM8K, MATH or AIME problem looks like, and the chat prompts are one-liners, so a
classifier trained on them alone learns source style and length: terse requests to prove a named theorem scored as
chat, everyday chat of three or four sentences scored as reasoning, code never seen. written_prompts.json beside this
module holds, in each of the ten languages, long everyday chat prompts (`chat`), terse hard requests (`hard`: named
theorems, one-line olympiad asks, hard design and proof tasks) and code or logic requests (`medium`; English also has a
few `easy` everyday sums). Written independently of the external evaluation set (training/data/external_prompts.py),
which no training or recipe choice reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter

from thinktier.deployments.classifier.difficulty_artifact import HeadClass

PROMPTS_FILE = Path(__file__).with_name("written_prompts.json")


@dataclass(frozen=True)
class WrittenPrompt:
    """One prompt. `id` is `written:<language>:<label>:<index>`; no prompt is a translation of another."""

    id: str
    text: str
    label: HeadClass
    language: str


_BY_LANGUAGE = TypeAdapter(dict[str, dict[HeadClass, list[str]]]).validate_json(PROMPTS_FILE.read_bytes())


def written_prompts(languages: Sequence[str]) -> list[WrittenPrompt]:
    """The prompts of `languages` (ISO 639-1), by language, then label, in the order written."""
    return [
        WrittenPrompt(f"written:{language}:{label}:{i}", text, label, language)
        for language in languages
        for label, texts in _BY_LANGUAGE.get(language, {}).items()
        for i, text in enumerate(texts)
    ]
