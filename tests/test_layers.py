"""One layer per top-level folder: each imports only the layers below it (README, Layout).

policies < deployments < training, cluster < loadtest < cli, all inside the one import package `thinktier`
(thinktier/ links to the folders). An import of a higher layer, or of a layer beside its own, at module level or inside
a function, is an upward arrow and fails this test, so the layout keeps showing the architecture. A folder says what
is in it: none holds more than about fifteen modules at one level, and no module is over 500 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGE = "thinktier"
FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor) for floor in (("policies",), ("deployments",), ("training", "cluster"), ("loadtest",), ("cli",))
)
LAYERS = frozenset().union(*FLOORS)
MAX_MODULES_PER_FOLDER = 16
MAX_MODULE_LINES = 500


def floor_of(layer: str) -> int:
    return next(rank for rank, floor in enumerate(FLOORS) if layer in floor)


def imported_modules(source: str) -> set[str]:
    """The dotted names a module's source imports (absolute imports; the project uses no relative ones)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def imported_layers(source: str) -> set[str]:
    """The project layers a module imports: `thinktier.<layer>...`."""
    parts = (name.split(".") for name in imported_modules(source))
    return {p[1] for p in parts if len(p) > 1 and p[0] == PACKAGE and p[1] in LAYERS}


def bare_layer_imports(source: str) -> list[str]:
    """Imports of a layer by its folder name (`import cluster`): not installed, so they break outside the repository."""
    return sorted(name for name in imported_modules(source) if name.split(".")[0] in LAYERS)


def upward_imports(layer: str, source: str) -> list[str]:
    rank = floor_of(layer)
    return sorted(other for other in imported_layers(source) if other != layer and floor_of(other) >= rank)


def project_modules() -> list[tuple[str, Path]]:
    return [(layer, path) for layer in sorted(LAYERS) for path in sorted((ROOT / layer).rglob("*.py"))]


def test_no_module_imports_a_layer_above_or_beside_its_own() -> None:
    arrows = [
        f"{path.relative_to(ROOT)} imports {other}"
        for layer, path in project_modules()
        for other in upward_imports(layer, path.read_text())
    ]
    assert arrows == []


def test_every_import_of_the_project_goes_through_the_thinktier_package() -> None:
    bare = [f"{path.relative_to(ROOT)}: {name}" for _, path in project_modules() for name in bare_layer_imports(path.read_text())]
    bare += [
        f"{path.relative_to(ROOT)}: {name}" for path in sorted((ROOT / "tests").rglob("*.py"))
        for name in bare_layer_imports(path.read_text())
    ]
    assert bare == []


def test_an_upward_import_is_caught_wherever_it_hides() -> None:
    hidden = "import json\n\ndef build():\n    from thinktier.cluster.app import build_app\n    return build_app\n"
    assert upward_imports("deployments", hidden) == ["cluster"]
    assert upward_imports("policies", "import thinktier.loadtest.report as r\n") == ["loadtest"]
    assert upward_imports("training", "from thinktier import cluster\n") == ["cluster"]
    assert upward_imports("cli", "from thinktier.policies.schema import Policy\nfrom thinktier.cluster import local\n") == []
    assert bare_layer_imports("from cluster import local\nimport thinktier.cluster\n") == ["cluster", "cluster.local"]


def test_the_package_links_every_layer_and_nothing_else() -> None:
    links = {p.name: p.readlink() for p in (ROOT / PACKAGE).iterdir() if p.is_symlink()}
    assert links == {layer: Path("..") / layer for layer in LAYERS}
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", PACKAGE}
    assert packages == set(LAYERS)


def test_no_folder_of_modules_is_a_heap() -> None:
    heaps = {}
    packages = [p.parent for _, p in project_modules() if p.name == "__init__.py"] + list((ROOT / "tests").rglob("__init__.py"))
    for folder in [ROOT / layer for layer in LAYERS] + [p if p.is_dir() else p.parent for p in packages]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > MAX_MODULES_PER_FOLDER:
            heaps[str(folder.relative_to(ROOT))] = len(modules)
    assert heaps == {}


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in [p for _, p in project_modules()] + sorted((ROOT / "tests").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
