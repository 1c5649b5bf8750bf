"""Where opcov's data files live and how they are named: the one module that knows the layout.

    coverage/<backend>/registered-torch-<torch>[-<package>-<version>].yaml          a scan
    coverage/<backend>/declared-torch-<torch>.yaml          what torch's sources declare (opcov.scan.declared)
    coverage/<backend>/probed-torch-<torch>[-<package>-<version>][-shard-I-of-N].yaml  a probe
    coverage/models/<model>/<mode>.yaml                                            an op set
    coverage/models/<model>/compile/<compile backend>-<mode>.yaml                  a compiled op set
    coverage/models/<model>/on/<backend>-<mode>.yaml      an op set recorded on the backend itself (trace --on)
    coverage/models/<model>/parallel/<style>-<world size>.yaml   a sharded training step (trace --parallel)
    coverage/distributed/dtensor-torch-<torch>.json      DTensor's sharding strategies (opcov.scan.sharding)
    coverage/distributed/process-group-<backend>.json    the process-group backend a device uses
    coverage/<backend>/compile/<kind>-torch-<torch>[...].yaml                       compile coverage
    coverage/zoo/outcomes[-shard-I-of-N].tsv           what 'opcov zoo trace --all' made of each model
    coverage/pynames-torch-<torch>.tsv                  the Python-name index (opcov.scan.pynames)

A backend's snapshots are told apart by the torch version in their names, so that
``opcov check`` can pick the one made with the op set's torch without opening any.
Everything that finds, names or picks a data file asks this module. Torch-free.
"""

from __future__ import annotations

import functools
import os
import re
import sys

from opcov.errors import DataError, UsageError
from opcov.store import parallel
from opcov.vocab import EVIDENCE_KINDS

DEFAULT_COVERAGE = "coverage"
MODELS = "models"  # the folder of op sets, under the coverage folder
# The torch.compile path's files: compiled op sets under models/<model>/, compile coverage under <backend>/.
# Only the compile path's readers look in it (``compile_files``); eager readers never enter it.
COMPILE = "compile"
# Op sets recorded on a backend's own device (``opcov trace --on``) under models/<model>/: check judges that
# backend with them; readers of the stand-in op sets (gaps, compare, the site) never enter it.
ON_DEVICE = "on"
# Sharded training steps (``opcov trace --parallel``) under models/<model>/: check judges them when asked
# (--parallel), the site shows them; the single-device readers (gaps, compare, recall) never enter it.
PARALLEL = "parallel"
EVIDENCE = EVIDENCE_KINDS  # the snapshot kinds: registered, probed, declared
YAML = (".yaml", ".yml")

_SNAPSHOT = re.compile(r"^(registered|probed|declared)-torch-(?P<torch>[^-]+(?:\+[^-]+)?)(?:-.*)?\.ya?ml$")


def bundled_coverage() -> str | None:
    """The coverage data that ships with opcov: ``opcov/bundled/coverage/`` in an installed wheel
    (setup.py copies it there), else the repository's own coverage/ for a source checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../opcov
    for candidate in (
        os.path.join(here, "bundled", DEFAULT_COVERAGE),
        os.path.join(os.path.dirname(os.path.dirname(here)), DEFAULT_COVERAGE),
    ):
        if os.path.isdir(os.path.join(candidate, MODELS)):
            return candidate
    return None


class FoundCoverage(str):
    """./coverage as ``read_coverage`` found it, the user having named no folder. A backend it has no
    data for (no snapshot and nothing misplaced in its folder: a trace's op sets under models/ are
    no backend's data) is read from the bundled data instead, said once per backend through ``say``, or
    once for all where it has no backend's data at all (``snapshots``, ``_say_fallback``): local op sets
    never hide the data opcov ships with.
    A folder named with --coverage is a plain str, read alone."""

    say: object  # a callable taking the line, or None
    said: set[str]
    own: bool | None  # whether some backend has data in the folder itself (has_own_data), once asked

    def __new__(cls, path: str, say=None):
        self = super().__new__(cls, path)
        self.say = say
        self.said = set()
        self.own = None
        return self


def beside_bundled(coverage_dir: str) -> str | None:
    """The bundled coverage folder when ``coverage_dir`` is a FoundCoverage that is not the bundled data
    itself (its readers fall back to it), else None."""
    if not isinstance(coverage_dir, FoundCoverage):
        return None
    bundled = bundled_coverage()
    if bundled is None or os.path.abspath(bundled) == os.path.abspath(coverage_dir):
        return None
    return bundled


def _bundled_for(coverage_dir: str, backend: str) -> str | None:
    """The bundled coverage folder to read ``backend`` from in place of ``coverage_dir`` (see
    FoundCoverage), else None."""
    bundled = beside_bundled(coverage_dir)
    if bundled is None:
        return None
    if any(_snapshots(coverage_dir, backend).values()) or strays(coverage_dir, backend):
        return None
    if not any(_snapshots(bundled, backend).values()):
        return None
    return bundled


def read_coverage(arg: str | None, say=None) -> str:
    """The coverage folder a reading command uses: ``--coverage`` when given (it must be a folder
    holding YAML data), else ./coverage when it exists, else the bundled data (said through ``say``,
    since it is not where the user stands). A one-line UsageError before any work otherwise."""
    if arg is not None:
        if not os.path.isdir(arg):
            raise UsageError(
                f"{arg}: no such coverage folder (leave --coverage out to use ./coverage or the bundled data)"
            )
        if not any(True for _ in _iter_yaml(arg)):
            raise UsageError(
                f"{arg}: no coverage data in this folder (no .yaml files); make some with "
                f"'opcov scan BACKEND' or leave --coverage out to use the bundled data"
            )
        return arg
    if os.path.isdir(DEFAULT_COVERAGE) and _holds_opcov_data(DEFAULT_COVERAGE):
        return FoundCoverage(DEFAULT_COVERAGE, say)
    bundled = bundled_coverage()
    if bundled is None:
        raise UsageError(
            f"no ./{DEFAULT_COVERAGE} folder here and no bundled data in this install; pass --coverage DIR"
        )
    if say:
        say(f"opcov: no ./{DEFAULT_COVERAGE} here; using the bundled coverage data ({bundled})")
    return bundled


def listdir(folder: str) -> list[str]:
    """os.listdir, where a folder opcov cannot read is a one-line error naming it: data left out
    unread would change every answer (a backend missing from the site, lint finding 0 errors)."""
    try:
        return os.listdir(folder)
    except OSError as exc:
        raise DataError(f"{folder}: cannot read this folder ({exc.strerror or exc}); fix its permissions") from None


def _walk_error(exc: OSError) -> None:
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return  # nothing there (as before): callers say so where it matters
    raise DataError(f"{exc.filename}: cannot read this folder ({exc.strerror or exc}); fix its permissions") from None


def walk(folder: str):
    """os.walk, where a folder it cannot read is a one-line error (os.walk skips it silently)."""
    return os.walk(folder, onerror=_walk_error)


def _holds_opcov_data(folder: str) -> bool:
    """Whether a folder looks like opcov's (a models/ folder or a backend's snapshot files), so that
    an unrelated ./coverage (a JavaScript coverage report, say) is not read as opcov data."""
    if os.path.isdir(os.path.join(folder, MODELS)):
        return True
    for entry in sorted(listdir(folder)):
        sub = os.path.join(folder, entry)
        if entry != COMPILE and os.path.isdir(sub) and any(_SNAPSHOT.match(f) for f in listdir(sub)):
            return True
    return False


def _iter_yaml(folder: str):
    for _root, _dirs, files in walk(folder):
        yield from (f for f in files if is_yaml(f))


def is_yaml(path: str) -> bool:
    """Whether a file name is a YAML data file (op set or coverage file)."""
    return path.endswith(YAML)


def yaml_files(folder: str, *, models: bool = True) -> list[str]:
    """YAML files under folder, walked in sorted order; without ``models`` no folder named models/ is entered."""
    found: list[str] = []
    for root, dirs, files in walk(folder):
        dirs[:] = sorted(d for d in dirs if (models or d != MODELS) and d not in (COMPILE, ON_DEVICE, PARALLEL))
        found.extend(os.path.join(root, f) for f in sorted(files) if is_yaml(f))
    return found


def coverage_files(paths, *, models: bool = False) -> list[str]:
    """Coverage YAML files under the given files or folders (default: coverage/), sorted; op sets
    under models/ only if ``models`` (they have their own schema)."""
    found = []
    for path in paths or [read_coverage(None, say=_say)]:
        if os.path.isdir(path):
            found.extend(yaml_files(path, models=models))
        elif os.path.exists(path):
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    return found


# ---------------------------------------------------------------- coverage snapshots


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def snapshot_name(
    evidence: str,
    torch: str,
    package: str | None = None,
    package_version: str | None = None,
    shard: tuple[int, int] | None = None,
) -> str:
    """<evidence>-torch-<torch>[-<package>-<version>][-shard-I-of-N].yaml; no package part for torch itself."""
    name = f"{evidence}-torch-{torch}"
    if package and package != "torch":
        name += f"-{package}-{package_version}"
    if shard:
        name += f"-shard-{shard[0]}-of-{shard[1]}"
    return name + ".yaml"


def scan_path(doc: dict, coverage_dir: str = DEFAULT_COVERAGE) -> str:
    """Where 'opcov scan' writes a registered (or, with --declared, a declared) document by default."""
    b = doc["backend"]
    return os.path.join(
        coverage_dir, b["name"], snapshot_name(doc["evidence"], doc["provenance"]["torch"], b["package"], b["version"])
    )


def probe_path(backend, shard=None, coverage_dir: str = DEFAULT_COVERAGE) -> str:
    """Where 'opcov probe' writes by default: named by the installed torch and backend package
    (read from package metadata, torch is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "unknown"
    return os.path.join(
        coverage_dir,
        backend.name,
        snapshot_name("probed", torch_version, backend.package, backend.installed_version() or "unknown", shard),
    )


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+\-]*")
NAME_CHARS = "letters, digits and '_.+-'"
FILE_NAME_MAX = 200  # characters in a file name opcov builds from data (a file system takes 255 bytes)
_FILE_NAME = re.compile(r"[A-Za-z0-9_.+\-]+")
_SAID = {"/": "a path separator '/'", "\\": "a path separator '\\'", "\0": "a NUL byte", "\n": "a line break"}


def name_problem(name, *, limit: int = FILE_NAME_MAX) -> str | None:
    """Why ``name`` cannot be a file or folder name opcov builds from data or keeps in a coverage folder,
    or None: a name is letters, digits and '_.+-' only (no path separator, NUL, line break or other control
    character), is not '.' or '..', and has at most ``limit`` characters. The one place that says what a
    name may be: plain names, snapshot names, observed runs' and vendor files' names, ``opcov lint``."""
    if not isinstance(name, str):
        return f"is not text ({type(name).__name__})"
    if not name:
        return "is empty"
    if len(name) > limit:
        return f"is longer than {limit} characters"
    if not _FILE_NAME.fullmatch(name):
        bad = next(c for c in name if not _FILE_NAME.fullmatch(c))
        what = _SAID.get(bad) or (
            f"a control character {bad!r}" if ord(bad) < 32 or ord(bad) == 127 else f"the character {bad!r}"
        )
        return f"holds {what}; a name is {NAME_CHARS} only"
    if name in (".", ".."):
        return "is a path part, not a name"
    return None


def check_name(name, what: str, *, where: str = "", plain: bool = False) -> str:
    """``name`` when ``name_problem`` finds nothing (and, if ``plain``, it is a plain name: one that names
    a folder, not starting with '.' or '-', at most 100 characters), else a one-line DataError naming
    ``where`` (a file and field) and what is wrong: a name read from data, never a path."""
    why = name_problem(name, limit=100 if plain else FILE_NAME_MAX)
    if why is None and plain and not _PLAIN_NAME.fullmatch(name):
        why = "starts with '.' or '-'"
    if why is not None:
        raise DataError(f"{where + ': ' if where else ''}{what} {repr(name)[:80]} {why}")
    return name


def plain_name(name, what: str = "backend") -> str:
    """``name`` when it can name a folder of its own (letters, digits and '_.+-', not starting with a
    dot or a dash, at most 100 characters); else a one-line UsageError. A name is data, never a path:
    'tpu/../cpu' or '..' would read or write another folder."""
    if name_problem(name, limit=100) is not None or not _PLAIN_NAME.fullmatch(name):
        shown = repr(name)[:80]
        raise UsageError(
            f"{what} name {shown} is not a plain name (letters, digits and '_.+-', not starting "
            "with '.' or '-'): opcov keeps each in a folder of that name"
        )
    return name


def folder_name(name: str) -> str:
    """``name`` (a model's, say 'pkg.mod:make' or 'org/model') encoded as a plain name for its folder:
    every other character '_', a leading '.' or '-' '_', at most 100 characters."""
    text = re.sub(r"[^A-Za-z0-9_.+\-]", "_", str(name))[:100] or "_"
    return "_" + text[1:] if text[0] in ".-" else text


def snapshots(coverage_dir: str, backend: str) -> dict[str, list[str]]:
    """Snapshots of a backend under coverage_dir/<backend>/, by evidence kind, newest name last; the
    bundled data's where ``coverage_dir`` is a FoundCoverage without data for the backend (said once)."""
    bundled = _bundled_for(coverage_dir, backend)
    if bundled is None:
        return _snapshots(coverage_dir, backend)
    where = os.path.join(bundled, plain_name(backend))
    _say_fallback(
        coverage_dir,
        backend,
        f"opcov: ./{coverage_dir} has no {backend} data; using the bundled data for {backend} ({where})",
    )
    return _snapshots(bundled, backend)


def _say_fallback(coverage_dir: str, key: str, line: str) -> None:
    """Say that a backend's data (``key``) is read from the bundled data: ``line``, once per key, where
    ./coverage has some backend's data of its own; where it has none (op sets only, from 'opcov trace'),
    one line for every backend, eager and compile: a check of three backends says one line, not four."""
    assert isinstance(coverage_dir, FoundCoverage)
    if coverage_dir.own is None:
        coverage_dir.own = has_own_data(coverage_dir)
    if not coverage_dir.own:
        bundled = beside_bundled(coverage_dir)
        line = (
            f"opcov: ./{coverage_dir} holds op sets only, no backend's data: every backend's is read from the "
            f"bundled data ({bundled})"
        )
        key = "*"
    _say_once(coverage_dir, key, line)


def backend_file(coverage_dir: str, backend: str, path: str) -> str:
    """``path`` (a file of ``backend``'s under ``coverage_dir``: its observed runs, its vendor tests'
    expectations), or the same file of the bundled data where ``coverage_dir`` is a FoundCoverage with no
    data for the backend (``snapshots`` reads the bundled data's for it, and says so)."""
    bundled = _bundled_for(coverage_dir, backend)
    if bundled is None or os.path.exists(path):
        return path
    return os.path.join(bundled, os.path.relpath(path, coverage_dir))


def _say_once(coverage_dir: str, key: str, line: str) -> None:
    """``line`` through a FoundCoverage's ``say``, once per ``key`` (a backend, or what else it read from
    the bundled data in its place)."""
    assert isinstance(coverage_dir, FoundCoverage)
    if key not in coverage_dir.said:
        coverage_dir.said.add(key)
        if callable(coverage_dir.say):
            coverage_dir.say(line)


def _snapshots(coverage_dir: str, backend: str) -> dict[str, list[str]]:
    folder = os.path.join(coverage_dir, plain_name(backend))
    out: dict[str, list[str]] = {kind: [] for kind in EVIDENCE}
    if os.path.isdir(folder):
        for name in sorted(listdir(folder)):
            m = _SNAPSHOT.match(name)
            if m:
                out[m.group(1)].append(os.path.join(folder, name))
    return out


def same_torch(a, b) -> bool:
    """Whether two torch versions define one op catalogue: builds of one release (2.13.0, 2.13.0+cpu,
    2.13.0+cu130) differ in the kernels they hold, not in the ops they define."""
    return str(a).split("+", 1)[0] == str(b).split("+", 1)[0]


def pick(files: list[str], torch_version: str) -> str | None:
    """The snapshot made with the op set's torch version (that build first, else another build of the
    same release: cuda data of 2.13.0 for an op set of 2.13.0+cpu), else the last by name."""
    return _pick(tuple(files), torch_version) if files else None


@functools.lru_cache(maxsize=256)
def _pick(files: tuple, torch_version: str) -> str | None:
    """pick, worked out once per listing and version (a zoo asks it for each op set and backend)."""
    made_with = {f: _SNAPSHOT.match(os.path.basename(f)).group("torch") for f in files}  # type: ignore[union-attr]  # snapshots() matched each
    exact = [f for f in files if made_with[f] == torch_version]
    same = [f for f in files if same_torch(made_with[f], torch_version)]
    # else the newest torch release (by number: 2.13.0 is newer than 2.9.0), then the last by name
    newest = sorted(files, key=lambda f: (release_key(made_with[f]), f))
    return (exact or same or newest)[-1]


def release_key(torch_version: str) -> tuple:
    """'2.13.0+cpu' -> (2, 13, 0): torch releases in numeric order (by name, 2.9 sorts after 2.13)."""
    head = torch_version.split("+", 1)[0]
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", head)[:3])


def backends_with_data(coverage_dir: str) -> list[str]:
    """The backends that have at least one snapshot under coverage_dir, sorted; for a FoundCoverage,
    the bundled data's backends too (its readers fall back to them, see FoundCoverage)."""
    if not os.path.isdir(coverage_dir):
        return []
    have = {
        d
        for d in listdir(coverage_dir)
        if d != MODELS and _PLAIN_NAME.fullmatch(d) and any(_snapshots(coverage_dir, d).values())
    }
    bundled = beside_bundled(coverage_dir)
    if bundled is not None:
        have |= {
            d
            for d in listdir(bundled)
            if d not in have and d != MODELS and _PLAIN_NAME.fullmatch(d) and _bundled_for(coverage_dir, d)
        }
    return sorted(have)


# ---------------------------------------------------------------- misplaced files

SNAPSHOT_NAMES = (
    "registered-torch-<torch>[-<package>-<version>].yaml, "
    "probed-torch-<torch>[-<package>-<version>][-shard-I-of-N].yaml and "
    "declared-torch-<torch>.yaml"
)
A_FOLDER = "a folder, where a data file is expected; remove or rename it"


def snapshot_name_problem(name, evidence: str, *, shard: bool = False) -> str | None:
    """Why ``name`` is not a snapshot file name of ``evidence`` (without a shard part unless ``shard``),
    or None: what a contributed bundle must name before opcov writes it into a backend's folder."""
    why = name_problem(name)
    if why is not None:
        return why
    m = _SNAPSHOT.match(name)
    if m is None or m.group(1) != evidence:
        return f"is not a {evidence} snapshot name ({evidence}-torch-<torch>[-<package>-<version>].yaml)"
    if not shard and "-shard-" in name:
        return "names one shard; merge the shards first ('opcov merge')"
    return None


def snapshot_evidence(path: str) -> str | None:
    """The evidence kind a file's name says it holds (registered, probed or declared), None for another name."""
    m = _SNAPSHOT.match(os.path.basename(path))
    return m.group(1) if m else None


NOT_A_SNAPSHOT = f"not a snapshot name; opcov reads only {SNAPSHOT_NAMES} in a backend's folder"
AT_THE_TOP = (
    "opcov reads no data file directly in a coverage folder: snapshots go in <backend>/, op sets in models/<model>/"
)


def is_coverage_folder(folder: str) -> bool:
    """Whether a folder is laid out as opcov's coverage folder (a models/ folder, or a backend's snapshots)."""
    return os.path.isdir(folder) and _holds_opcov_data(folder)


def in_coverage_folder(path: str) -> bool:
    """Whether a file sits where opcov's layout puts data files: in models/<model>/, or in a folder of
    a coverage folder that has a models/ folder. A sibling folder of snapshot files alone is too weak a
    sign to call a file misplaced: a folder of runs (or pytest's base temp folder) has those too."""
    up = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    return os.path.basename(up) == MODELS or os.path.isdir(os.path.join(up, MODELS))


def strays(coverage_dir: str, backend: str | None = None) -> list[tuple[str, str]]:
    """(path, why) for each thing under coverage_dir that opcov's readers skip where they look for data,
    sorted: a folder named like a data file, a YAML file in a backend's folder whose name is not a
    snapshot's (or in a folder below it), a YAML file directly in the coverage folder. With
    ``backend``, only that backend's folder."""
    if not os.path.isdir(coverage_dir):
        return []
    out = []
    if backend is None:
        entries = sorted(listdir(coverage_dir))
        isdir = {e: os.path.isdir(os.path.join(coverage_dir, e)) for e in entries}
        out += [(os.path.join(coverage_dir, e), A_FOLDER if isdir[e] else AT_THE_TOP) for e in entries if is_yaml(e)]
        folders = [e for e in entries if isdir[e] and not is_yaml(e)]
    else:
        folders = [backend]
    for folder in folders:
        top = os.path.join(coverage_dir, folder)
        for root, dirs, files in walk(top):
            out += [(os.path.join(root, d), A_FOLDER) for d in dirs if is_yaml(d)]
            dirs[:] = sorted(d for d in dirs if not is_yaml(d) and d not in (COMPILE, ON_DEVICE, PARALLEL))
            if folder == MODELS:
                continue
            for f in sorted(files):
                if not is_yaml(f):
                    continue
                if root != top:
                    why = f"opcov reads {folder}'s snapshots only directly in {folder}/, so it ignores this file"
                elif not _SNAPSHOT.match(f):
                    why = NOT_A_SNAPSHOT
                else:
                    continue
                out.append((os.path.join(root, f), why))
    return sorted(out)


# ---------------------------------------------------------------- the Python-name index

PYNAMES = re.compile(r"^pynames-torch-(?P<torch>.+)\.tsv$")


def pynames_path(torch_version: str, coverage_dir: str = DEFAULT_COVERAGE) -> str:
    """Where the Python-name index built with torch ``torch_version`` lives."""
    return os.path.join(coverage_dir, f"pynames-torch-{torch_version}.tsv")


def pick_pynames(coverage_dir: str, torch_version: str) -> str | None:
    """The Python-name index of ``torch_version`` under coverage_dir (that build, else another build of
    the release), else the last by name, else None."""
    found = sorted(f for f in listdir(coverage_dir) if PYNAMES.match(f)) if os.path.isdir(coverage_dir) else []
    bundled = beside_bundled(coverage_dir)
    if not found and bundled is not None:  # a ./coverage made by 'opcov trace' holds no index: the bundled one
        return pick_pynames(bundled, torch_version)
    torch_of = {f: m.group("torch") for f in found if (m := PYNAMES.match(f))}
    exact = [f for f in found if torch_of[f] == torch_version]
    same = [f for f in found if same_torch(torch_of[f], torch_version)]
    chosen = (exact or same or sorted(found, key=lambda f: (release_key(torch_of[f]), f)))[-1:]
    return os.path.join(coverage_dir, chosen[0]) if chosen else None


# ---------------------------------------------------------------- model op sets


def models_dir(coverage_dir: str = DEFAULT_COVERAGE) -> str:
    """The folder of model op sets."""
    return os.path.join(coverage_dir, MODELS)


def in_models(rel: str) -> bool:
    """Whether a path relative to the coverage folder (with '/') is an op set under models/."""
    return rel.startswith(MODELS + "/")


def opset_path(name: str, mode: str, root: str | None = None) -> str:
    """<root>/<model>/<mode>.yaml, root being coverage/models/ by default."""
    return os.path.join(
        models_dir() if root is None else root, plain_name(name, "model"), f"{plain_name(mode, 'mode')}.yaml"
    )


def model_folder(model: str, coverage_dir: str) -> str:
    """The folder of MODEL's op sets: MODEL itself when it is a folder, else coverage_dir/models/MODEL."""
    return model if os.path.isdir(model) else os.path.join(models_dir(coverage_dir), model)


def zoo_model(model: str, coverage_dir: str) -> str:
    """MODEL as 'opcov check' names it, or the bundled zoo's folder of that name where ``coverage_dir`` is a
    FoundCoverage with no such folder (said once): a ./coverage made by 'opcov trace' never hides a zoo model,
    nor makes 'check llama' trace it anew."""
    bundled = beside_bundled(coverage_dir)
    if bundled is None or os.path.exists(model) or not _PLAIN_NAME.fullmatch(model):
        return model
    folder = os.path.join(models_dir(coverage_dir), model)
    theirs = os.path.join(models_dir(bundled), model)
    if os.path.isdir(folder) or not os.path.isdir(theirs):
        return model
    _say_once(
        coverage_dir,
        f"{MODELS}/{model}",
        f"opcov: ./{folder} is not there; using the bundled op sets of {model} ({theirs})",
    )
    return theirs


def opset_files(folder: str) -> list[str]:
    """The op-set files directly in one model's folder, sorted (one per mode)."""
    return sorted(os.path.join(folder, f) for f in listdir(folder) if is_yaml(f))


def zoo_coverage(coverage_dir: str) -> str:
    """The coverage folder whose models/ a zoo-wide reader (gaps, compare) walks: ``coverage_dir``, or the
    bundled data where it is a FoundCoverage that holds no eager op set and no backend data of its own (a
    ./coverage that 'opcov trace --path compile' made), said once: such a folder never hides the zoo."""
    bundled = beside_bundled(coverage_dir)
    if bundled is None or model_files(coverage_dir) or has_own_data(coverage_dir):
        return coverage_dir
    _say_once(
        coverage_dir,
        MODELS,
        f"opcov: ./{models_dir(coverage_dir)} holds no eager op set; reading the bundled zoo ({models_dir(bundled)})",
    )
    return bundled


def site_coverage(coverage_dir: str) -> str:
    """The coverage folder 'opcov site' renders: ``coverage_dir``, or the bundled data where it is a
    FoundCoverage with no backend's data of its own (op sets only, from 'opcov trace'), said once."""
    bundled = beside_bundled(coverage_dir)
    if bundled is None or has_own_data(coverage_dir):
        return coverage_dir
    _say_once(
        coverage_dir,
        "site",
        f"opcov: ./{coverage_dir} holds op sets only, no backend's data; rendering the bundled data ({bundled})",
    )
    return bundled


def has_own_data(coverage_dir: str) -> bool:
    """Whether a backend has a snapshot under ``coverage_dir`` itself (never the bundled data's)."""
    return any(
        d != MODELS and _PLAIN_NAME.fullmatch(d) and any(_snapshots(coverage_dir, d).values())
        for d in listdir(coverage_dir)
    )


def model_files(coverage_dir: str) -> list[str]:
    """Every op set under coverage_dir/models/, walked in sorted order (not those recorded on a backend
    itself, models/<model>/on/: the same model on another path, which would count it twice)."""
    return yaml_files(models_dir(coverage_dir))


def ondevice_opset_path(name: str, backend: str, mode: str, root: str | None = None) -> str:
    """<root>/<model>/on/<backend>-<mode>.yaml: the op set recorded on ``backend`` itself (``trace --on``)."""
    return os.path.join(models_dir() if root is None else root, name, ON_DEVICE, f"{backend}-{mode}.yaml")


def ondevice_opset(folder: str, backend: str, mode: str) -> str | None:
    """The op set of one model's folder recorded on ``backend`` itself for ``mode``, None when there is none."""
    path = os.path.join(folder, ON_DEVICE, f"{backend}-{mode}.yaml")
    return path if os.path.isfile(path) else None


def ondevice_files(folder: str) -> list[str]:
    """Every op set recorded on a backend itself (models/<model>/on/*.yaml) under folder, sorted: the
    files ``yaml_files`` leaves out, for the readers that check every data file (lint)."""
    return _model_sub_files(folder, ON_DEVICE)


def _model_sub_files(folder: str, sub: str) -> list[str]:
    """Every YAML file in a models/<model>/<sub>/ folder under folder, sorted."""
    found: list[str] = []
    for root, dirs, files in walk(folder):
        dirs.sort()
        if os.path.basename(root) == sub and os.path.basename(os.path.dirname(os.path.dirname(root))) == MODELS:
            found.extend(os.path.join(root, f) for f in sorted(files) if is_yaml(f))
    return found


def parallel_opset_path(name: str, style: str, world_size: int, root: str | None = None) -> str:
    """<root>/<model>/parallel/<style>-<world size>.yaml: a sharded training step (``trace --parallel``)."""
    return os.path.join(
        models_dir() if root is None else root,
        plain_name(name, "model"),
        PARALLEL,
        parallel.file_name(plain_name(style, "parallel style"), world_size),
    )


def parallel_opset_files(folder: str) -> list[str]:
    """The sharded training steps of one model's folder (models/<model>/parallel/*.yaml), sorted."""
    sub = os.path.join(folder, PARALLEL)
    return sorted(os.path.join(sub, f) for f in listdir(sub) if is_yaml(f)) if os.path.isdir(sub) else []


def parallel_model_files(coverage_dir: str) -> list[str]:
    """Every sharded training step under coverage_dir/models/, sorted."""
    top = models_dir(coverage_dir)
    if not os.path.isdir(top):
        return []
    return [f for m in sorted(listdir(top)) for f in parallel_opset_files(os.path.join(top, m))]


def parallel_files(folder: str) -> list[str]:
    """Every sharded training step (models/<model>/parallel/*.yaml) under folder, sorted: the files
    ``yaml_files`` leaves out, for the readers that check every data file (lint)."""
    return _model_sub_files(folder, PARALLEL)


DISTRIBUTED = "distributed"  # DTensor's sharding strategies and process groups (JSON), under the coverage folder


ZOO = "zoo"  # the folder of the whole-zoo outcome tables, under the coverage folder


def zoo_table_path(coverage_dir: str = DEFAULT_COVERAGE, shard: tuple[int, int] | None = None) -> str:
    """coverage/zoo/outcomes[-shard-I-of-N].tsv: what 'opcov zoo trace --all' made of each architecture."""
    suffix = f"-shard-{shard[0]}-of-{shard[1]}" if shard else ""
    return os.path.join(coverage_dir, ZOO, f"outcomes{suffix}.tsv")


# ---------------------------------------------------------------- the torch.compile path


def compiled_opset_path(name: str, backend: str, mode: str, root: str | None = None) -> str:
    """<root>/<model>/compile/<compile backend>-<mode>.yaml, root being coverage/models/ by default."""
    return os.path.join(models_dir() if root is None else root, name, COMPILE, f"{backend}-{mode}.yaml")


def break_opset_path(folder: str, backend: str, mode: str) -> str:
    """<model folder>/on/<backend>-<mode>.yaml: the model's eager op set recorded on ``backend`` itself
    ('opcov trace --on'), also what runs at the graph breaks of its compiled op sets on that backend."""
    return os.path.join(folder, ON_DEVICE, f"{plain_name(backend, 'backend')}-{plain_name(mode, 'mode')}.yaml")


def compiled_opset_files(folder: str, backend: str | None = None) -> list[str]:
    """The compiled op sets of one model's folder (of one compile backend), sorted."""
    sub = os.path.join(folder, COMPILE)
    if not os.path.isdir(sub):
        return []
    return sorted(
        os.path.join(sub, f) for f in os.listdir(sub) if is_yaml(f) and (backend is None or f.startswith(backend + "-"))
    )


def compiled_model_files(coverage_dir: str, backend: str | None = None) -> list[str]:
    """Every compiled op set under coverage_dir/models/ (of one compile backend), sorted."""
    top = models_dir(coverage_dir)
    if not os.path.isdir(top):
        return []
    return [f for m in sorted(os.listdir(top)) for f in compiled_opset_files(os.path.join(top, m), backend)]


def compile_coverage_dir(backend: str, coverage_dir: str = DEFAULT_COVERAGE) -> str:
    """coverage/<backend>/compile/: what the backend's compiler accepts (opcov.scan.compiled, the compile probe)."""
    return os.path.join(coverage_dir, backend, COMPILE)


def compile_snapshots(coverage_dir: str, backend: str) -> dict[str, list[str]]:
    """A backend's compile-coverage files by kind (registered, probed, declared); the bundled data's where
    ``coverage_dir`` is a FoundCoverage with no data of its own for the backend, eager or compile (said once)."""
    found = _compile_snapshots(coverage_dir, backend)
    bundled = _bundled_for(coverage_dir, backend)
    if bundled is None or any(found.values()):
        return found
    theirs = _compile_snapshots(bundled, backend)
    if any(theirs.values()):
        where = compile_coverage_dir(plain_name(backend), bundled)
        _say_fallback(
            coverage_dir,
            f"{backend}/{COMPILE}",
            f"opcov: ./{coverage_dir} has no {backend} compile data; using the bundled data for it ({where})",
        )
    return theirs


def _compile_snapshots(coverage_dir: str, backend: str) -> dict[str, list[str]]:
    folder = compile_coverage_dir(backend, coverage_dir)
    out: dict[str, list[str]] = {k: [] for k in EVIDENCE}
    if os.path.isdir(folder):
        for f in sorted(os.listdir(folder)):
            m = _SNAPSHOT.match(f)
            if m:
                out[m.group(1)].append(os.path.join(folder, f))
    return out
