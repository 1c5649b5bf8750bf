"""What each op set contributed to a zoo-wide answer, kept in the user's cache folder between runs.

``compare`` and ``gaps`` read and judge every op set of the zoo (~1,500 files; ~10 s of CPU here, most of
it parsing and checking the files): a run after one that changed nothing reads each op set's small
contribution back instead. Kept apart from both so that neither imports the other for it. A first run
reads the contributions committed with the data instead (``committed``, opcov.store.answers), where they
are fresh.
"""

from __future__ import annotations

import hashlib
import json
import os

from opcov.store import answers
from opcov.store.parsed import code_hash


class Kept:
    """Each op set's (mode, contribution) from an earlier run of the same question (``name``: 'compare-tpu-cuda',
    'gaps-tpu'), valid while nothing it rests on changed: the op set file (path, size, modification time,
    inode); every other file under the coverage folder (coverage files, observed runs, op sets recorded on
    a backend: whatever a judgment may read), and opcov's source. A contribution that rests on something
    outside the coverage folder (a live scan of an installed backend with no data there) is not kept.
    A contribution of None is an op set an earlier ``--mode`` skipped. The backends known (``backends_key``)
    are part of the key too."""

    def __init__(self, name: str, coverage_dir: str, paths: list[str]):
        self.paths = paths
        self.file = f"{name}-{hashlib.sha256(os.path.realpath(coverage_dir).encode()).hexdigest()[:12]}.json"
        self.root = os.path.realpath(coverage_dir)
        opsets = set(paths)
        others = []
        for root, dirs, files in os.walk(coverage_dir):
            dirs.sort()
            others += [os.path.join(root, f) for f in sorted(files) if os.path.join(root, f) not in opsets]
        key = [code_hash(), backends_key(), [_stat(p) for p in others]]
        self.key = hashlib.sha256(json.dumps(key).encode()).hexdigest()
        self.stats = {p: _stat(p) for p in paths}

    def reuse(self, modes) -> dict:
        """path -> (mode, contribution) of the op sets an earlier run answered for these ``modes``."""
        from opcov.torchenv import read_cache

        kept = read_cache(self.file, {})
        if not isinstance(kept, dict) or kept.get("key") != self.key:
            return {}
        out = {}
        for p in self.paths:
            entry = kept.get("opsets", {}).get(p)
            if not entry or entry[0] != self.stats[p]:
                continue
            mode, contribution = entry[1], entry[2]
            if contribution is None and not (modes and mode not in modes):
                continue  # skipped by an earlier --mode, wanted now
            out[p] = (mode, contribution)
        return out

    def save(self, done: dict, sources) -> None:
        """Keep ``done`` (path -> (mode, contribution)); ``sources(contribution)``: the files it rests on."""
        from opcov.torchenv import write_cache

        opsets, inside = {}, {}
        for p, (mode, contribution) in done.items():
            for source in sources(contribution) if contribution is not None else ():
                if source not in inside:
                    inside[source] = self._inside(source)
                if not inside[source]:
                    return  # rests on something outside the coverage folder
            opsets[p] = [self.stats[p], mode, contribution]
        try:
            write_cache(self.file, {"key": self.key, "opsets": opsets})
        except OSError:
            pass  # no cache folder to write to: the next run judges again

    def _inside(self, source: str) -> bool:
        return os.path.isfile(source) and os.path.realpath(source).startswith(self.root + os.sep)


def _stat(path: str) -> list:
    try:
        st = os.stat(path)
    except OSError:
        return [path]
    return [path, st.st_size, st.st_mtime_ns, st.st_ino]


def committed(question: str, coverage_dir: str, paths: list[str], relocate) -> dict:
    """path -> (mode, contribution) of the op sets ``paths`` that the answers committed with the data hold
    for ``question`` (opcov.store.answers), where those are fresh for ``coverage_dir``; {} else.
    ``relocate(contribution, fn)``: the contribution with ``fn`` applied to each source path in it (kept
    from the coverage folder, joined to ``coverage_dir`` here)."""
    opsets = answers.read(coverage_dir, question, backends_key())
    if not opsets:
        return {}
    out = {}
    for p in paths:
        entry = opsets.get(os.path.relpath(p, coverage_dir))
        if isinstance(entry, list) and len(entry) == 2 and entry[1] is not None:
            out[p] = (entry[0], relocate(entry[1], lambda rel: os.path.join(coverage_dir, rel)))
    return out


def to_commit(done: dict, coverage_dir: str, relocate, sources) -> dict | None:
    """``done`` (path -> (mode, contribution), every op set judged) as ``committed`` reads it back: paths
    from the coverage folder; None where a contribution rests on a file outside it (``sources``, as for
    ``Kept.save``) or an op set was skipped."""
    root = os.path.realpath(coverage_dir) + os.sep
    out = {}
    for p, (mode, contribution) in sorted(done.items()):
        if contribution is None:
            return None
        for source in sources(contribution):
            if not (os.path.isfile(source) and os.path.realpath(source).startswith(root)):
                return None
        out[os.path.relpath(p, coverage_dir)] = [
            mode,
            relocate(contribution, lambda s: os.path.relpath(s, coverage_dir)),
        ]
    return out


def backends_key() -> str:
    """A digest of the backends this process knows (built-ins, records, installed plugins' entry points):
    a judgment rests on them (each one's own kernels, whose data is whose), so what is kept does too."""
    from opcov.backends import known_backends

    return hashlib.sha256(repr(known_backends()).encode()).hexdigest()
