"""Hand-written training prompts for the ways users write that the problem sets lack (issue 33).

The problem sets teach what a GSM8K, MATH or AIME problem looks like, and the chat prompts are one-liners, so a
classifier trained on them alone learns source style and length: terse requests to prove a named theorem scored as
chat, everyday chat of three or four sentences scored as reasoning, code never seen. written_prompts.json beside this
module holds, in each of the ten languages, long everyday chat prompts (`chat`), terse hard requests (`hard`: named
theorems, one-line olympiad asks, hard design and proof tasks) and code or logic requests (`medium`; English also has a
few `easy` everyday sums). Written independently of the external evaluation set (training/data/external_prompts.py),
which no training or recipe choice reads.

written_prompts_2.json is a second batch (difficulty-v7), its ids `written-2:...` so the first batch's split does not
move: longer everyday chat (three to six sentences), terse hard requests and code, logic or planning requests, in the
ten languages and also in German, Russian and Hindi (EXTRA_LANGUAGES), which no problem set has. Written, like the
first, without reading the external set, and no prompt is a translation of another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter

from thinktier.deployments.classifier.difficulty_artifact import HeadClass

PROMPTS_FILE = Path(__file__).with_name("written_prompts.json")
SECOND_BATCH_FILE = Path(__file__).with_name("written_prompts_2.json")
EXTRA_LANGUAGES = ("de", "ru", "hi")  # the second batch's languages beyond the problem sets' ten: always trained with it


@dataclass(frozen=True)
class WrittenPrompt:
    """One prompt. `id` is `written:<language>:<label>:<index>` (`written-2:` in the second batch); no prompt is a
    translation of another."""

    id: str
    text: str
    label: HeadClass
    language: str


_ADAPTER = TypeAdapter(dict[str, dict[HeadClass, list[str]]])
_BY_LANGUAGE = _ADAPTER.validate_json(PROMPTS_FILE.read_bytes())
_SECOND_BATCH = _ADAPTER.validate_json(SECOND_BATCH_FILE.read_bytes())


def _prompts(prefix: str, by_language: dict[str, dict[HeadClass, list[str]]], languages: Sequence[str]) -> list[WrittenPrompt]:
    return [
        WrittenPrompt(f"{prefix}:{language}:{label}:{i}", text, label, language)
        for language in languages
        for label, texts in by_language.get(language, {}).items()
        for i, text in enumerate(texts)
    ]


def written_prompts(languages: Sequence[str]) -> list[WrittenPrompt]:
    """The first batch's prompts of `languages` (ISO 639-1), by language, then label, in the order written."""
    return _prompts("written", _BY_LANGUAGE, languages)


def second_batch(languages: Sequence[str]) -> list[WrittenPrompt]:
    """The second batch's prompts of `languages` and of EXTRA_LANGUAGES, by language, then label, in the order written."""
    return _prompts("written-2", _SECOND_BATCH, [*languages, *(lang for lang in EXTRA_LANGUAGES if lang not in languages)])
