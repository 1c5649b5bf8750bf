"""Where opcov's data files live and how they are named: the one module that knows the layout.

    coverage/<backend>/registered-torch-<torch>[-<package>-<version>].yaml          a scan
    coverage/<backend>/probed-torch-<torch>[-<package>-<version>][-shard-I-of-N].yaml  a probe
    coverage/models/<model>/<mode>.yaml                                            an op set

A backend's snapshots are told apart by the torch version in their names, so that
``opcov check`` can pick the one made with the op set's torch without opening any.
Everything that finds, names or picks a data file asks this module. Torch-free.
"""

from __future__ import annotations

import os
import re

from opcov.errors import UsageError

DEFAULT_COVERAGE = "coverage"
MODELS = "models"  # the folder of op sets, under the coverage folder
EVIDENCE = ("registered", "probed")
YAML = (".yaml", ".yml")

_SNAPSHOT = re.compile(r"^(registered|probed)-torch-(?P<torch>[^-]+(?:\+[^-]+)?)(?:-.*)?\.ya?ml$")


def is_yaml(path: str) -> bool:
    """Whether a file name is a YAML data file (op set or coverage file)."""
    return path.endswith(YAML)


def yaml_files(folder: str, *, models: bool = True) -> list[str]:
    """YAML files under folder, walked in sorted order; without ``models`` no folder named models/ is entered."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if models or d != MODELS)
        found.extend(os.path.join(root, f) for f in sorted(files) if is_yaml(f))
    return found


def coverage_files(paths, *, models: bool = False) -> list[str]:
    """Coverage YAML files under the given files or folders (default: coverage/), sorted; op sets
    under models/ only if ``models`` (they have their own schema)."""
    found = []
    for path in paths or [DEFAULT_COVERAGE]:
        if os.path.isdir(path):
            found.extend(yaml_files(path, models=models))
        elif os.path.exists(path):
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    return found


# ---------------------------------------------------------------- coverage snapshots

def snapshot_name(evidence: str, torch: str, package: str | None = None, package_version: str | None = None,
                  shard: tuple[int, int] | None = None) -> str:
    """<evidence>-torch-<torch>[-<package>-<version>][-shard-I-of-N].yaml; no package part for torch itself."""
    name = f"{evidence}-torch-{torch}"
    if package and package != "torch":
        name += f"-{package}-{package_version}"
    if shard:
        name += f"-shard-{shard[0]}-of-{shard[1]}"
    return name + ".yaml"


def scan_path(doc: dict, coverage_dir: str = DEFAULT_COVERAGE) -> str:
    """Where 'opcov scan' writes a registered document by default."""
    b = doc["backend"]
    return os.path.join(coverage_dir, b["name"],
                        snapshot_name("registered", doc["provenance"]["torch"], b["package"], b["version"]))


def probe_path(backend, shard=None, coverage_dir: str = DEFAULT_COVERAGE) -> str:
    """Where 'opcov probe' writes by default: named by the installed torch and backend package
    (read from package metadata, torch is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "unknown"
    return os.path.join(coverage_dir, backend.name, snapshot_name(
        "probed", torch_version, backend.package, backend.installed_version() or "unknown", shard))


def snapshots(coverage_dir: str, backend: str) -> dict[str, list[str]]:
    """Snapshots of a backend under coverage_dir/<backend>/, by evidence kind, newest name last."""
    folder = os.path.join(coverage_dir, backend)
    out: dict[str, list[str]] = {kind: [] for kind in EVIDENCE}
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            m = _SNAPSHOT.match(name)
            if m:
                out[m.group(1)].append(os.path.join(folder, name))
    return out


def pick(files: list[str], torch_version: str) -> str | None:
    """The snapshot made with the op set's torch version, else the last by name."""
    if not files:
        return None
    same = [f for f in files if _SNAPSHOT.match(os.path.basename(f)).group("torch") == torch_version]
    return (same or files)[-1]


# ---------------------------------------------------------------- model op sets

def models_dir(coverage_dir: str = DEFAULT_COVERAGE) -> str:
    """The folder of model op sets."""
    return os.path.join(coverage_dir, MODELS)


def in_models(rel: str) -> bool:
    """Whether a path relative to the coverage folder (with '/') is an op set under models/."""
    return rel.startswith(MODELS + "/")


def opset_path(name: str, mode: str, root: str | None = None) -> str:
    """<root>/<model>/<mode>.yaml, root being coverage/models/ by default."""
    return os.path.join(models_dir() if root is None else root, name, f"{mode}.yaml")


def model_folder(model: str, coverage_dir: str) -> str:
    """The folder of MODEL's op sets: MODEL itself when it is a folder, else coverage_dir/models/MODEL."""
    return model if os.path.isdir(model) else os.path.join(models_dir(coverage_dir), model)


def opset_files(folder: str) -> list[str]:
    """The op-set files directly in one model's folder, sorted (one per mode)."""
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if is_yaml(f))


def model_files(coverage_dir: str) -> list[str]:
    """Every op set under coverage_dir/models/, walked in sorted order."""
    return yaml_files(models_dir(coverage_dir))
