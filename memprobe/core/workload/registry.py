"""Load and validate the workload registry (models.yaml) into typed entries.

No torch here: listing and validating workloads must be fast and work on any machine. The family
name of each entry maps to the module that builds it (imported only inside the trial process).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from memprobe.core.files.inputs import read_text

# The workload families a registry entry may name. Which module builds each is memprobe.workloads.families'
# business (BUILDERS): the ground floor knows the names only.
FAMILIES: tuple[str, ...] = (
    "toy-mlp",
    "bert-pretraining",
    "bert-squad",
    "transformer-translation",
    "timm-classifier",
    "pix2pixhd",
    "timm",
    "hf",
    "module",
    "llama-causal-lm",
)


UNITS = ("images", "sequences", "tokens", "samples")
OPTIMIZERS = ("sgd", "adam", "adamw")
_ENTRY_KEYS = {"family", "description", "unit", "params", "optimizer", "test_only", "version"}


class RegistryError(ValueError):
    """The registry file is missing, malformed, or names a workload that does not exist."""


@dataclass(frozen=True)
class Workload:
    """One named workload: how to build it (family + params), how to count it, how to train it."""

    name: str
    family: str
    description: str
    unit: str
    params: dict[str, Any] = field(default_factory=dict)
    optimizer: dict[str, Any] = field(default_factory=dict)
    test_only: bool = False
    version: int = 1

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Workload":
        """The workload a to_dict() stored (a result file's, a child process's request); test_only is not kept."""
        return cls(
            data["name"],
            data["family"],
            data.get("description", ""),
            data.get("unit", "samples"),
            dict(data.get("params", {})),
            dict(data.get("optimizer", {})),
            version=int(data.get("version", 1)),
        )

    def to_dict(self) -> dict[str, Any]:
        """The definition as stored in result files: enough to tell whether two results compare."""
        return {
            "name": self.name,
            "family": self.family,
            "version": self.version,
            "description": self.description,
            "unit": self.unit,
            "params": dict(self.params),
            "optimizer": dict(self.optimizer),
        }


def default_registry_path() -> Path:
    """The models.yaml shipped inside the installed package."""
    return Path(str(resources.files("memprobe").joinpath("models.yaml")))


def load_registry(path: str | Path | None = None) -> dict[str, Workload]:
    """Read and validate a registry file; return workloads by name, in file order.

    Raises RegistryError with a one-line message naming the file, the entry and its line.
    """
    path = Path(path) if path is not None else default_registry_path()
    try:
        text = read_text(path)
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read registry ({exc.strerror or exc})") from exc
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RegistryError(f"{path}:{where}: malformed YAML: {problem}") from exc
    if root is None or not isinstance(data, dict) or not data:
        raise RegistryError(f"{path}: expected a mapping of workload names to definitions")
    seen: dict[str, int] = {}
    for node, _ in root.value:
        line = node.start_mark.line + 1
        if node.value in seen:
            raise RegistryError(
                f"{path}: line {line}: duplicate entry '{node.value}' (first at line {seen[node.value]})"
            )
        seen[node.value] = line
    # Without duplicates the composed nodes and the loaded mapping are in the same order, so each
    # entry gets its line even when YAML reads its name as a number or a boolean.
    lines = [node.start_mark.line + 1 for node, _ in root.value]
    return {
        str(name): _validate(str(name), entry, f"{path}: entry '{name}' (line {line})")
        for (name, entry), line in zip(data.items(), lines)
    }


def _validate(name: str, entry: Any, where: str) -> Workload:
    if not isinstance(entry, dict):
        raise RegistryError(f"{where}: expected a mapping with family, unit, params, optimizer")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise RegistryError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    family = entry.get("family")
    if family not in FAMILIES:
        raise RegistryError(f"{where}: unknown family '{family}' (known: {', '.join(sorted(FAMILIES))})")
    unit = entry.get("unit")
    if unit not in UNITS:
        raise RegistryError(f"{where}: unit must be one of {', '.join(UNITS)}, got '{unit}'")
    params = entry.get("params", {})
    if not isinstance(params, dict):
        raise RegistryError(f"{where}: params must be a mapping")
    optimizer = entry.get("optimizer")
    if not isinstance(optimizer, dict) or optimizer.get("name") not in OPTIMIZERS:
        raise RegistryError(f"{where}: optimizer must be a mapping whose name is one of {', '.join(OPTIMIZERS)}")
    version = entry.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise RegistryError(f"{where}: version must be an integer")
    test_only = entry.get("test_only", False)
    if not isinstance(test_only, bool):
        raise RegistryError(f"{where}: test_only must be true or false")
    return Workload(
        name=name,
        family=family,
        description=str(entry.get("description", "")),
        unit=unit,
        params=params,
        optimizer=optimizer,
        test_only=test_only,
        version=version,
    )


def match(registry: dict[str, Workload], pattern: str, hint: str = "") -> list[Workload]:
    """The workloads one name or wildcard names ('all' = every workload that is not test_only).

    Raises RegistryError for a pattern that matches nothing, listing the known names (then `hint`).
    """
    if pattern == "all":
        matches = [w for w in registry.values() if not w.test_only]
    else:
        matches = [w for n, w in registry.items() if fnmatch.fnmatchcase(n, pattern)]
    if not matches:
        known = ", ".join(n for n, w in registry.items() if not w.test_only)
        raise RegistryError(f"unknown model '{pattern}' (known: {known}{hint})")
    return matches


def select(registry: dict[str, Workload], patterns: str) -> list[Workload]:
    """Resolve a comma-separated list of names or wildcards ('all', 'bert-*') to workloads.

    'all' means every workload that is not test_only. Raises RegistryError for a name that matches
    nothing, listing the known names.
    """
    chosen: list[Workload] = []
    for pattern in (p.strip() for p in patterns.split(",")):
        if not pattern:
            continue
        chosen.extend(m for m in match(registry, pattern) if m not in chosen)
    if not chosen:
        raise RegistryError("no model given")
    return chosen
