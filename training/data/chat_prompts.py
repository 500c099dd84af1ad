"""Hand-written chat prompts: prompts that need no reasoning, in each language of the problem sets.

The difficulty classifier's `chat` class (the chat tier's traffic). No such data set ships on PyPI, so they are
written in the open, in chat_prompts.json beside this module, labelled by language and kind: greetings, short
factual questions, rewriting and translation requests, small talk. Each language's prompts were written in that
language as people type them (not translated from the English list), so a held-out prompt has no translation of
itself in training.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter

ChatKind = Literal["greeting", "factual", "rewriting", "small-talk"]
PromptsByLanguage = dict[str, dict[ChatKind, tuple[str, ...]]]
"""The prompts' texts by language (ISO 639-1), then by kind, in the order written."""

PROMPTS_FILE = Path(__file__).with_name("chat_prompts.json")


@dataclass(frozen=True)
class ChatPrompt:
    """One prompt. `id` is `chat:<language>:<index>`, the index counting the language's prompts in kind order."""

    id: str
    text: str
    kind: ChatKind
    language: str


CHAT_PROMPTS: PromptsByLanguage = TypeAdapter(PromptsByLanguage).validate_json(PROMPTS_FILE.read_bytes())


def chat_prompts(languages: Iterable[str] | None = None) -> list[ChatPrompt]:
    """The chat prompts of `languages` (ISO 639-1; all when None), in a fixed order."""
    wanted = list(CHAT_PROMPTS) if languages is None else list(languages)
    unknown = sorted(set(wanted) - set(CHAT_PROMPTS))
    if unknown:
        raise ValueError(f"no chat prompts in {unknown}; available: {sorted(CHAT_PROMPTS)}")
    prompts: list[ChatPrompt] = []
    for language in wanted:
        texts = [(kind, text) for kind, kind_texts in CHAT_PROMPTS[language].items() for text in kind_texts]
        prompts += [ChatPrompt(f"chat:{language}:{i}", text, kind, language) for i, (kind, text) in enumerate(texts)]
    return prompts
