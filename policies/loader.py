"""Load a policy YAML file and report every problem with file, line, column, field path and a hint.

Problems come from three places, all reported together, sorted by line:
  * the YAML itself (syntax, tabs, an empty file, duplicate keys, which PyYAML would otherwise
    silently resolve to the last one);
  * pydantic field validation (types, ranges, unknown fields, missing fields), each error
    located at its YAML node and rewritten with a hint;
  * the schema's cross-field checks (model validators). Their messages start with the field
    they are about (`budgets.high: ...`, `routing.chat_tier: ...`); the loader appends that
    path to the validator's location, so the problem points at the offending line.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from thinktier.policies.schema import Policy

DEFAULT_POLICY = Path(__file__).with_name("default.yaml")

Loc = tuple[int | str, ...]
KEY_MARK = "[key]"  # pydantic's location part for an invalid dict key


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


# --- YAML ----------------------------------------------------------------------------------------

_YAML_HINTS = {
    "found character '\\t'": "indent with spaces; YAML does not allow tabs",
    "mapping values are not allowed": "quote a value that contains ': ', or check the indentation",
    "could not find expected ':'": "every line of a mapping needs 'key: value'; check the indentation",
    "expected <block end>": "this line's indentation does not match its siblings",
}


def _yaml_problem(exc: yaml.YAMLError, file: str) -> PolicyProblem:
    mark = getattr(exc, "problem_mark", None)
    line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    problem = str(getattr(exc, "problem", None) or exc)
    context = getattr(exc, "context", None)
    message = f"not valid YAML: {problem}" + (f" ({context})" if context else "")
    hint = next((h for needle, h in _YAML_HINTS.items() if needle in problem), None)
    return PolicyProblem(file, line, column, "", f"{message}; {hint}" if hint else message)


def _compose(text: str) -> tuple[yaml.Node | None, Any]:
    """The YAML node tree (for line numbers) and the Python data built from it, in one parse."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


def _duplicate_keys(node: yaml.Node, file: str, path: tuple[str, ...] = ()) -> list[PolicyProblem]:
    """Keys given twice in one mapping: YAML loaders keep the last silently, hiding an edit."""
    problems: list[PolicyProblem] = []
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            if name in first_line:
                problems.append(
                    PolicyProblem(
                        file,
                        key.start_mark.line + 1,
                        key.start_mark.column + 1,
                        ".".join((*path, name)),
                        f"duplicate key {name!r} (first given on line {first_line[name]}); "
                        "YAML would silently keep only this one, so remove one of them",
                    )
                )
            else:
                first_line[name] = key.start_mark.line + 1
            problems += _duplicate_keys(value, file, (*path, name))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            problems += _duplicate_keys(item, file, (*path, str(index)))
    return problems


def _node_at(root: yaml.Node, loc: Loc, want_key: bool = False) -> yaml.Node:
    """The deepest YAML node on `loc` (pydantic's error location); with `want_key`, the key node of the last part."""
    node = root
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            pairs: list[tuple[yaml.Node, yaml.Node]] = node.value
            pair = next(((k, v) for k, v in pairs if str(k.value) == str(key)), None)
            if pair is None:
                return node
            if want_key and key == loc[-1]:
                return pair[0]
            node = pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            return node
    return node


# --- schema walking (for hints) ------------------------------------------------------------------


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model whose field `loc` would name next (None when `loc` leaves the models)."""
    current: object = Policy
    for part in loc:
        current = _strip_optional(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        elif get_origin(current) is list:
            current = get_args(current)[0]
        else:
            return None
    current = _strip_optional(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _strip_optional(annotation: object) -> object:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _description(loc: Loc) -> str | None:
    model = _model_at(loc[:-1])
    field = model.model_fields.get(str(loc[-1])) if model and loc else None
    return field.description if field else None


# --- pydantic errors to messages -----------------------------------------------------------------

_KINDS = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "dict": "a mapping (key: value lines)",
    "model": "a mapping (key: value lines)",
    "list": "a list",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
_LEADING_PATH = re.compile(r"^(?P<path>[A-Za-z_]\w*(?:\.\w+)+|[A-Za-z_]\w*(?=:))(?::\s*|\s+)")


def _type_message(err: ErrorDetails, loc: Loc) -> str | None:
    kind = next((k for k in _KINDS if err["type"] in (f"{k}_type", f"{k}_parsing", f"{k}_attributes_type")), None)
    if kind is None:
        return None
    got = err["input"]
    message = f"expected {_KINDS[kind]}, got {got!r}"
    if kind == "string" and isinstance(got, int | float | bool):
        message += f"; quote it: {loc[-1]}: \"{got}\""
    return message


def _extra_message(err: ErrorDetails, loc: Loc) -> str:
    name = str(loc[-1])
    model = _model_at(loc[:-1])
    if model is None:
        return f"unknown field {name!r}"
    fields = sorted(model.model_fields)
    close = difflib.get_close_matches(name, fields, n=1)
    if close:
        return f"unknown field {name!r}; did you mean {close[0]!r}?"
    return f"unknown field {name!r}; the fields here are {', '.join(fields)}"


def _missing_message(err: ErrorDetails, loc: Loc) -> str:
    description = _description(loc)
    return f"required field is missing: add '{loc[-1]}:'" + (f" ({description})" if description else "")


def _bound_message(err: ErrorDetails, loc: Loc) -> str | None:
    op = _BOUNDS.get(err["type"])
    if op is None:
        return None
    bound = next(iter((err.get("ctx") or {}).values()), None)
    return f"must be {op} {bound}, got {err['input']!r}"


def _other_message(err: ErrorDetails, loc: Loc) -> str | None:
    ctx = err.get("ctx") or {}
    if err["type"] == "literal_error":
        if loc and loc[-1] == KEY_MARK:
            return f"{err['input']!r} is not a valid key here; use {ctx['expected']}"
        return f"{err['input']!r} is not one of {ctx['expected']}"
    if err["type"] == "int_from_float":
        return f"must be a whole number, got {err['input']!r}"
    if err["type"] == "string_pattern_mismatch":  # the value is not echoed: it may be a secret pasted in by mistake
        description = _description(loc)
        return f"must match {ctx['pattern']}" + (f" ({description})" if description else "")
    if err["type"] == "value_error":
        return err["msg"].removeprefix("Value error, ")
    return None


_MESSAGES: tuple[Callable[[ErrorDetails, Loc], str | None], ...] = (_type_message, _bound_message, _other_message)


def _message(err: ErrorDetails, loc: Loc) -> str:
    if err["type"] == "extra_forbidden":
        return _extra_message(err, loc)
    if err["type"] == "missing":
        return _missing_message(err, loc)
    for make in _MESSAGES:
        message = make(err, loc)
        if message is not None:
            return message
    return err["msg"]


def _problems(errors: list[ErrorDetails], root: yaml.Node, file: str) -> list[PolicyProblem]:
    """One problem per pydantic error (and per line of a multi-line validator message), at its YAML node."""
    problems = []
    for err in errors:
        loc: Loc = tuple(err["loc"])
        messages = _message(err, loc).split("\n") if err["type"] == "value_error" else [_message(err, loc)]
        for message in messages:
            where, text = loc, message
            leading = _LEADING_PATH.match(message) if err["type"] == "value_error" else None
            if leading:
                path = (int(part) if part.isdigit() else part for part in leading["path"].split("."))
                where, text = (*loc, *path), message[leading.end() :]
            on_key = err["type"] == "extra_forbidden" or (bool(where) and where[-1] == KEY_MARK)
            node = _node_at(root, tuple(p for p in where if p != KEY_MARK), want_key=on_key)
            field = ".".join(str(p) for p in where if p != KEY_MARK)
            problems.append(PolicyProblem(file, node.start_mark.line + 1, node.start_mark.column + 1, field, text))
    return problems


_NEEDS_TIERS = "it needs at least 'tiers:' (see policies/default.yaml)"


def parse_policy(text: str, file: str = "<policy>") -> Policy:
    """Validate policy text; raise PolicyError naming every problem."""
    try:
        root, data = _compose(text)
    except yaml.YAMLError as exc:
        raise PolicyError([_yaml_problem(exc, file)]) from None
    if root is None:
        raise PolicyError([PolicyProblem(file, 1, 1, "", f"the policy is empty; {_NEEDS_TIERS}")])
    if not isinstance(data, dict):
        line, column = root.start_mark.line + 1, root.start_mark.column + 1
        message = f"a policy must be a YAML mapping, got a {type(data).__name__}; {_NEEDS_TIERS}"
        raise PolicyError([PolicyProblem(file, line, column, "", message)])
    problems = _duplicate_keys(root, file)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems += _problems(exc.errors(), root, file)
    if problems:
        raise PolicyError(sorted(problems, key=lambda p: (p.line, p.column, p.field)))
    return policy


def _child(node: Any, key: str, knob: str) -> Any:
    """`node[key]` of a policy's data: a field of a mapping, or an item of a list by its index."""
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    if isinstance(node, dict) and key in node:
        return node[key]
    have = sorted(node) if isinstance(node, dict) else f"{len(node)} list items" if isinstance(node, list) else node
    raise ValueError(f"{knob}: {key!r} is not a field here; found {have}")


def with_setting(policy: Policy, knob: str, value: str) -> Policy:
    """The policy with one dotted field set (e.g. tiers.reasoning.engine.scheduling_policy=fcfs; a number indexes a
    list: lending.0.max_share=0.25), validated again. `value` is JSON (numbers, true/false/null, lists, objects) or a
    bare word such as fcfs."""
    data = copy.deepcopy(policy.model_dump(mode="json"))
    node: Any = data
    *path, last = knob.split(".")
    for key in path:
        node = _child(node, key, knob)
    if isinstance(node, list):
        _child(node, last, knob)  # an item that exists
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    node[int(last) if isinstance(node, list) else last] = parsed
    return parse_policy(json.dumps(data), f"{knob}={value}")


def load_policy_with(path: str | Path, settings: Iterable[tuple[str, str]]) -> Policy:
    """The policy at `path` with each (knob, value) of `settings` applied in order (`with_setting`)."""
    policy = load_policy(path)
    for knob, value in settings:
        policy = with_setting(policy, knob, value)
    return policy


def dump_policy(policy: Policy) -> str:
    """The policy as YAML that `load_policy` reads back to the same policy."""
    return yaml.safe_dump(policy.model_dump(mode="json"), sort_keys=False)


def write_policy_variant(source: str | Path, edit: Callable[[dict[str, Any]], None], dest: Path) -> Path:
    """Write to `dest` a copy of the policy at `source` with `edit` applied to its data; the copy must validate."""
    data = yaml.safe_load(Path(source).read_text())
    edit(data)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    load_policy(dest)
    return dest


def load_policy(path: str | Path | None = None) -> Policy:
    """Load and validate the policy at `path` (the embedded default when None)."""
    path = Path(path) if path is not None else DEFAULT_POLICY
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyError([PolicyProblem(str(path), 1, 1, "", f"cannot read policy file: {exc.strerror}")]) from None
    return parse_policy(text, str(path))
