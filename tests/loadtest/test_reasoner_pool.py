"""The reasoner bench's aims and `thinktier bench reasoner --pool`: runs of other seeds judged together."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from thinktier.cli.main import main as thinktier_main
from thinktier.loadtest.bench.reasoner.behaviours import Row
from thinktier.loadtest.bench.reasoner.report import Aim, aims, summarize


def _rows(hard_right: int, vote_samples: float) -> list[Row]:
    full = [Row("full", cls, 1 if cls == "easy" else 120, 11999, 60 if cls == "easy" else 4500, True, True, False, 0)
            for cls in ("easy", "medium") for _ in range(10)]
    full += [Row("full", "hard", 120, 11999, 4500, i < hard_right, True, False, 100 * (i + 1)) for i in range(10)]
    vote = [Row("vote", cls, 120, 11999, 4500, True, True, False, None, vote_samples) for cls in ("easy", "medium", "hard")
            for _ in range(10)]
    return full + vote


def _write_run(folder: Path, seed: int, rows: list[Row], model: str = "/tmp/reasoner-large") -> Path:
    folder.mkdir(parents=True)
    report = {"command": f"bench seed {seed}", "device": "one test device", "model": model, "size": "large",
              "difficulty": {}, "settings": {"seed": seed}, "wall_s": 10.0, "summary": {}, "aims": [],
              "rows": [asdict(r) for r in rows]}
    (folder / "results.json").write_text(json.dumps(report), encoding="utf-8")
    return folder


def _aim(aim_list: list[Aim], name: str) -> bool | None:
    return next(a for a in aim_list if a.name == name).met


def test_a_vote_that_adds_exactly_ten_points_meets_its_aim() -> None:
    """One sample right 90 % of the time, the vote 100 %: 10 points (1.0 - 0.9 is 0.0999... in floating point)."""
    gained = aims(summarize(_rows(hard_right=9, vote_samples=0.9)), 4000)
    short = aims(summarize(_rows(hard_right=9, vote_samples=0.92)), 4000)
    assert _aim(gained, "a vote of 5 corrects sampled mistakes") is True
    assert _aim(short, "a vote of 5 corrects sampled mistakes") is False


def test_pooled_runs_are_judged_over_all_their_problems_with_each_run_beside(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    low = _write_run(tmp_path / "seed-0", 0, _rows(hard_right=7, vote_samples=0.85))
    high = _write_run(tmp_path / "seed-1", 1, _rows(hard_right=10, vote_samples=0.85))
    out = tmp_path / "pooled"
    assert thinktier_main(["bench", "reasoner", "--size", "large", "--pool", str(low), str(high), "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert report["summary"]["full"]["hard"] == {**report["summary"]["full"]["hard"], "n": 20, "accuracy": 0.85}
    assert next(a for a in report["aims"] if a["name"].startswith("accuracy with full"))["met"] is True
    first_alone = next(a for a in report["runs"][0]["aims"] if a["name"].startswith("accuracy with full"))
    assert first_alone["met"] is False and "hard 70%" in first_alone["measured"]
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "2 runs pooled, seeds 0, 1" in readme and "| seed 0 | seed 1 |" in readme and "hard 70% (**missed**)" in readme
    assert "met    accuracy with full thinking (T=0.6): easy 100%, medium 100%, hard 85%" in capsys.readouterr().out


def test_pooling_refuses_runs_of_other_models_and_folders_without_results(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    one = _write_run(tmp_path / "a", 0, _rows(9, 0.9))
    other = _write_run(tmp_path / "b", 1, _rows(9, 0.9), model="builtin:reasoner-small")
    assert thinktier_main(["bench", "reasoner", "--pool", str(one), str(other), "--out", str(tmp_path / "p")]) == 2
    assert "different models or sizes" in capsys.readouterr().err
    assert thinktier_main(["bench", "reasoner", "--pool", str(one), str(tmp_path / "none"), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "none/results.json: no such file" in err and "--out" in err
    assert not (tmp_path / "p").exists()
    with pytest.raises(SystemExit):
        thinktier_main(["bench", "reasoner", "--pool"])
