"""Does the deployed state machine run the repository's lifecycle (infra/statemachine/lifecycle.asl.json)?

The stack renders the file by replacing its `${Name}` placeholders (CloudFormation's
DefinitionSubstitutions); the deployed definition is compared with the file where each placeholder
matches any value, the same value wherever the same name appears. The client may not import `infra`
(pyproject's import contracts), so the file is found beside the installed package without importing it.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
MAX_DIFFERENCES = 5


def repository_definition() -> tuple[Path, str]:
    """The lifecycle definition shipped with the installed trainplane; FileNotFoundError if it is not."""
    spec = importlib.util.find_spec("infra")  # finds the package without running it
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "statemachine" / "lifecycle.asl.json"
        if path.is_file():
            return path, path.read_text()
    raise FileNotFoundError("infra/statemachine/lifecycle.asl.json is not installed with this trainplane")


def differences(deployed: str, template: str) -> list[str]:
    """Where the deployed definition departs from the template (JSON paths), at most MAX_DIFFERENCES."""
    try:
        got = json.loads(deployed)
    except ValueError as exc:
        return [f"the deployed definition is not JSON ({exc})"]
    found: list[str] = []
    _compare(got, json.loads(template), "$", {}, found)
    return found[:MAX_DIFFERENCES]


def _compare(got: Any, want: Any, path: str, bound: dict[str, str], found: list[str]) -> None:
    if len(found) >= MAX_DIFFERENCES:
        return
    if isinstance(want, dict):
        if not isinstance(got, dict):
            found.append(f"{path}: expected an object")
            return
        for key in sorted(want.keys() - got.keys()):
            found.append(f"{path}.{key}: missing")
        for key in sorted(got.keys() - want.keys()):
            found.append(f"{path}.{key}: not in the repository's definition")
        for key in sorted(want.keys() & got.keys()):
            _compare(got[key], want[key], f"{path}.{key}", bound, found)
    elif isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            found.append(f"{path}: expected a list of {len(want)}")
            return
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _compare(g, w, f"{path}[{i}]", bound, found)
    elif isinstance(want, str) and _PLACEHOLDER.search(want):
        if not isinstance(got, str) or not _matches(got, want, bound):
            found.append(f"{path}: {got!r} does not render {want!r}")
    elif got != want or type(got) is not type(want):
        found.append(f"{path}: {got!r} (the repository has {want!r})")


def _matches(got: str, template: str, bound: dict[str, str]) -> bool:
    names: list[str] = []
    pattern = ""
    last = 0
    for m in _PLACEHOLDER.finditer(template):
        pattern += re.escape(template[last : m.start()]) + "(.+?)"
        names.append(m.group(1))
        last = m.end()
    pattern += re.escape(template[last:])
    match = re.fullmatch(pattern, got)
    if match is None:
        return False
    return all(bound.setdefault(name, value) == value for name, value in zip(names, match.groups(), strict=True))
