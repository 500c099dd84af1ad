"""One layer per top-level folder: each imports only the layers below it (README, Layout).

policies < deployments < cluster < loadtest < cli. An import of a higher layer, at module level or
inside a function, is an upward arrow and fails this test, so the layout keeps showing the architecture.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
LAYERS = ("policies", "deployments", "cluster", "loadtest", "cli")


def imported_layers(source: str) -> set[str]:
    """The project layers a module's source imports (absolute imports; the project uses no relative ones)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & set(LAYERS)
    return found


def upward_imports(layer: str, source: str) -> list[str]:
    rank = LAYERS.index(layer)
    return sorted(other for other in imported_layers(source) if LAYERS.index(other) > rank)


def test_no_module_imports_a_layer_above_its_own() -> None:
    arrows = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            for above in upward_imports(layer, path.read_text()):
                arrows.append(f"{path.relative_to(ROOT)} imports {above}")
    assert arrows == []


def test_an_upward_import_is_caught_wherever_it_hides() -> None:
    hidden = "import json\n\ndef build():\n    from cluster.app import build_app\n    return build_app\n"
    assert upward_imports("deployments", hidden) == ["cluster"]
    assert upward_imports("policies", "import loadtest.report as r\n") == ["loadtest"]
    assert upward_imports("cli", "from policies.schema import Policy\nfrom cluster import local\n") == []


def test_every_project_module_lives_in_a_layer() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(LAYERS)
