"""An external set of prompts written for evaluation only: the ways users write that the training sources lack.

Written by hand in external_prompts.json beside this module, after the issue that asked for it (issue 33) and before any
recipe was tried, and never read by training or by recipe selection: terse requests to prove named theorems, olympiad
problems in another writer's words, everyday chat of three or four sentences, code and logic or planning requests, in
languages inside the trained ten and outside them (German, Russian, Hindi). Each prompt is labelled with the class of
reasoning it needs: `chat` (none), `easy`, `medium` or `hard`. `thinktier classifier bench` reports it beside the
held-out split (training/data/external_problems.py is the other external set: problems of other sources, English only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from thinktier.deployments.classifier.difficulty_artifact import HeadClass

PromptKind = Literal["terse-hard", "olympiad", "long-chat", "short-chat", "code", "logic", "grade-school"]
PROMPTS_FILE = Path(__file__).with_name("external_prompts.json")


class _Written(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    label: HeadClass
    text: str


@dataclass(frozen=True)
class ExternalPrompt:
    """One prompt. `id` is `external:<language>:<kind>:<index>`."""

    id: str
    text: str
    label: HeadClass
    kind: PromptKind
    language: str


_BY_LANGUAGE = TypeAdapter(dict[str, dict[PromptKind, list[_Written]]]).validate_json(PROMPTS_FILE.read_bytes())


def external_prompts() -> list[ExternalPrompt]:
    """Every prompt of the set, by language, then kind, in the order written."""
    return [
        ExternalPrompt(f"external:{language}:{kind}:{i}", row.text, row.label, kind, language)
        for language, kinds in _BY_LANGUAGE.items()
        for kind, rows in kinds.items()
        for i, row in enumerate(rows)
    ]
