"""Load a policy YAML file and report every problem with file, line, column and field path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from policies.schema import Policy

DEFAULT_POLICY = Path(__file__).with_name("default.yaml")


@dataclass(frozen=True)
class PolicyProblem:
    file: str
    line: int
    column: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class PolicyError(ValueError):
    """A policy that cannot be used, with every problem found in it."""

    def __init__(self, problems: list[PolicyProblem]) -> None:
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"invalid policy ({count}):\n" + "\n".join(f"  {p}" for p in problems))


def _node_at(root: yaml.Node, loc: tuple[int | str, ...]) -> yaml.Node:
    """The deepest YAML node on the path `loc` (pydantic's error location)."""
    node = root
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == str(key)), None)
            if match is None:
                return node
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            return node
    return node


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def parse_policy(text: str, file: str = "<policy>") -> Policy:
    """Validate policy text; raise PolicyError naming every problem."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise PolicyError([PolicyProblem(file, line, column, "", f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    if not isinstance(data, dict) or root is None:
        raise PolicyError([PolicyProblem(file, 1, 1, "", "a policy must be a YAML mapping with at least 'tiers'")])
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            node = _node_at(root, loc)
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "literal_error":
                message = f"{err['input']!r} is not one of {err['ctx']['expected']}"
            elif err["type"] == "extra_forbidden":
                message = "unknown field (check the spelling; `thinktier policy schema` lists the fields)"
            problems.append(PolicyProblem(file, node.start_mark.line + 1, node.start_mark.column + 1, _field_path(loc), message))
        raise PolicyError(problems) from None


def load_policy(path: str | Path | None = None) -> Policy:
    """Load and validate the policy at `path` (the embedded default when None)."""
    path = Path(path) if path is not None else DEFAULT_POLICY
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyError([PolicyProblem(str(path), 1, 1, "", f"cannot read policy file: {exc.strerror}")]) from None
    return parse_policy(text, str(path))
