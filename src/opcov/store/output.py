"""Where opcov writes: "can I write here?" checks, made before any work, and atomic writes.

Every file opcov writes (coverage files, op sets, reports, site pages) goes through
``write_atomic``: a temporary file in the same folder, renamed over the target, so an interrupted
or failed write never leaves half a file, and the temporary file is removed whatever stops the
write (a full disk, Ctrl-C). A symbolic link, a folder or a device at the target is refused, never
written through or replaced: a link planted in an output folder could otherwise make opcov
overwrite a file elsewhere. Commands call ``check_writable_file`` / ``check_writable_dir`` first,
so an unwritable ``--out`` costs a one-line error at once, not a traceback after a long run.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
import stat

from opcov.errors import UsageError

# Pseudo file systems: files there are kernel interfaces, never data.
PSEUDO_ROOTS = ("/proc", "/sys")
NAME_MAX = 255  # bytes in one file name on the common file systems (ext4, xfs, btrfs, apfs, ntfs)

_FULL = "free some space or choose another path"
_DENIED = "choose a folder you can write"
# errno -> (what happened, what to do)
_WHY = {
    errno.ENOSPC: ("no space left on the device", _FULL),
    errno.EDQUOT: ("disk quota exceeded", _FULL),
    errno.EACCES: ("permission denied", _DENIED),
    errno.EPERM: ("permission denied", _DENIED),
    errno.EROFS: ("read-only file system", _DENIED),
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter name"),
    errno.EISDIR: ("it is a folder", "name a file"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "choose another path"),
    errno.ENOENT: ("no such folder", "choose another path"),
}


def _why(exc: OSError) -> str:
    what, todo = _WHY.get(exc.errno or 0, (exc.strerror or str(exc), "choose another path"))
    return f"{what}; {todo}"


@functools.lru_cache(maxsize=64)
def _real(folder: str) -> str:
    return os.path.realpath(folder)  # cached: a site writes thousands of files into a few folders


def _refuse_pseudo(path: str) -> str:
    """``path`` made absolute; a one-line error when it (or what its folder's links lead to) is under
    /proc or /sys. A link at ``path`` itself is refused elsewhere."""
    absolute = os.path.abspath(path)
    real = _real(os.path.dirname(absolute))
    if any(p == root or p.startswith(root + "/") for p in (absolute, real) for root in PSEUDO_ROOTS):
        raise UsageError(
            f"cannot write {path}: {' and '.join(PSEUDO_ROOTS)} hold kernel interfaces, not files; choose another path"
        )
    return absolute


def _lstat(path: str, shown: str):
    """os.lstat, or None when nothing is there; other failures are one-line errors."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot write {shown}: {_why(exc)}") from None


def _refuse_link(info, path: str, what: str) -> None:
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise UsageError(f"{path} is a symbolic link; opcov never writes through links: remove it, or pass {what}")


def _check_folder(folder: str, shown: str) -> None:
    """``folder`` exists as a writable folder, or can be made: its nearest existing ancestor is one."""
    probe = folder
    while True:
        info = _lstat(probe, shown)
        if info is not None:
            break
        parent = os.path.dirname(probe)
        if parent == probe:
            raise UsageError(f"cannot write {shown}: no folder of it exists")
        probe = parent
    if not os.path.isdir(probe):
        raise UsageError(f"cannot write {shown}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write {shown}: folder {probe} is not writable "
            "(permissions or a read-only file system); choose another path"
        )


def check_writable_file(path: str) -> None:
    """Raise a one-line UsageError unless a file can be written at ``path``: its folder exists or can
    be made and is writable, and ``path`` is not a folder, a symbolic link, a device or under /proc.
    Call it before any work, so a bad ``--out`` fails at once."""
    if not path or path.endswith(("/", os.sep)) or os.path.basename(path) in ("", ".", ".."):
        raise UsageError(f"cannot write {path!r}: name a file, not a folder")
    absolute = _refuse_pseudo(path)
    if len(os.path.basename(absolute).encode("utf-8", "surrogateescape")) > NAME_MAX:
        raise UsageError(f"cannot write {path[:80]}...: file name over {NAME_MAX} bytes; choose a shorter one")
    info = _lstat(absolute, path)
    _refuse_link(info, path, "another path")
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise UsageError(f"cannot write {path}: it is a folder; name a file in it")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise UsageError(f"cannot write {path}: not a regular file (a device, pipe or socket); choose another path")
    _check_folder(os.path.dirname(absolute), path)


def check_writable_dir(path: str, *, marker: str | None = None, allow=(), files=()) -> None:
    """Raise a one-line UsageError unless opcov may write the folder ``path`` (made if missing) and
    the relative paths ``files`` ('a/b.html') in it: ``path`` is a writable folder, not a symbolic
    link, not under /proc, and no symbolic link, folder or device stands where a file of ``files``
    (or one of its folders) goes. With ``marker`` (a file name), a non-empty folder without that
    file is refused: the caller owns only folders it made, and may remove files there; a folder
    holding only entries named in ``allow`` (the site's docs/, which the caller never touches) counts
    as empty."""
    if not path:
        raise UsageError("no output folder given")
    absolute = _refuse_pseudo(path)
    info = _lstat(absolute, path)
    _refuse_link(info, path, "the real folder, or a new one")
    if info is None:
        _check_folder(absolute, path)
        return
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"cannot write {path}: it is not a folder; pass a folder")
    if not os.access(absolute, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write {path}: the folder is not writable "
            "(permissions or a read-only file system); choose another folder"
        )
    if marker is not None and set(os.listdir(absolute)) - set(allow):
        mark = _lstat(os.path.join(absolute, marker), path)
        if mark is None or not stat.S_ISREG(mark.st_mode):
            raise UsageError(
                f"{path}: not empty and not an opcov site (no {marker} file); pass --out with an empty or new folder"
            )
    seen: set[str] = set()
    for rel in files:
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            sub = "/".join(parts[:depth])
            if sub in seen:
                continue
            seen.add(sub)
            here = os.path.join(path, *parts[:depth])
            info = _lstat(here, here)
            if info is None:
                break  # nothing below a missing folder either
            _refuse_link(info, here, "another output folder")
            last = depth == len(parts)
            if not last and not stat.S_ISDIR(info.st_mode):
                raise UsageError(f"cannot write {os.path.join(path, *parts)}: {here} is not a folder; remove it")
            if last and not stat.S_ISREG(info.st_mode):
                raise UsageError(f"cannot write {here}: it is a folder or a device, not a file; remove it")


def _write_all(fd: int, blob: bytes) -> None:
    """All of ``blob`` to ``fd`` (os.write may take less than it is given)."""
    view = memoryview(blob)
    while view:
        view = view[os.write(fd, view) :]


def write_new(path: str, blob: bytes) -> None:
    """Create ``path``, which must not exist, with ``blob`` (its folders made if missing): one exclusive
    open, no temporary file and rename, so about a third fewer file-system operations where a site
    writes ~14,000 pages into a new folder. O_EXCL with O_NOFOLLOW never opens an existing file or a
    planted link; something already there is written by ``write_atomic`` instead. A failed write
    removes its file; one killed outright leaves a short file, which the next render rewrites (it
    compares every file it keeps). OS errors become one-line UsageErrors naming ``path``."""
    absolute = _refuse_pseudo(path)
    try:
        os.makedirs(os.path.dirname(absolute), exist_ok=True)
        fd = os.open(
            absolute,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
            0o666,
        )
    except FileExistsError:
        write_atomic(path, blob, durable=False)
        return
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {_why(exc)}") from None
    try:
        _write_all(fd, blob)
    except BaseException as exc:  # a full disk, or Ctrl-C: no half-written page left behind
        os.close(fd)
        try:
            os.remove(absolute)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path}: {_why(exc)}") from None
        raise
    os.close(fd)


def _remove_stale(folder: str, prefix: str) -> None:
    """Remove temporary files ``prefix<PID>-<hex>`` of this target left by a process that was killed
    outright (SIGKILL runs no cleanup) and is gone; a live writer's file is left alone. Only for
    data files (``durable``): the site writes thousands of pages and lists no folder per page."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for entry in names:
        if not entry.startswith(prefix):
            continue
        pid, dash, rest = entry[len(prefix) :].partition("-")
        if not (pid.isdigit() and dash and len(rest) == 8):
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its writer is alive
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        try:
            os.remove(os.path.join(folder, entry))
        except OSError:
            pass


def write_atomic(path: str, content, *, durable: bool = True) -> None:
    """Write ``content`` (str as UTF-8, or bytes) to ``path`` atomically: a temporary file in the
    same folder (made if missing), fsync'd when ``durable``, renamed over ``path``. The temporary
    file is removed on any failure, KeyboardInterrupt included. A symbolic link, folder or device at
    ``path`` is refused, never replaced; OS errors (full disk, permissions, read-only file system)
    become one-line UsageErrors naming ``path``."""
    blob = content.encode("utf-8") if isinstance(content, str) else content
    absolute = _refuse_pseudo(path)
    info = _lstat(absolute, path)
    _refuse_link(info, path, "another path")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise UsageError(f"cannot write {path}: it is a folder or a device, not a file")
    folder, name = os.path.split(absolute)
    tmp: str | None = None
    fd: int | None = None
    try:
        os.makedirs(folder, exist_ok=True)
        while fd is None:  # O_EXCL: never opens an existing file or a planted link
            candidate = os.path.join(folder, f"{name[: NAME_MAX - 40]}.tmp{os.getpid()}-{secrets.token_hex(4)}")
            try:
                fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                continue
            tmp = candidate
        _write_all(fd, blob)
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = None
        os.replace(tmp, absolute)  # type: ignore[arg-type]  # set with fd above  # a link that appeared since the check is replaced, not followed
        tmp = None
        if durable:
            _remove_stale(folder, f"{name[: NAME_MAX - 40]}.tmp")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {_why(exc)}") from None
    finally:
        if fd is not None:
            os.close(fd)
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass


# ---------------------------------------------------------------- no output may be an input

# What opcov writes at a file path it is given, and how the first bytes of such a file read.
COVERAGE, OPSET, REPORT, TABLE = "coverage", "opset", "report", "table"
BUNDLE, OBSERVED, VENDOR, PLAN = "bundle", "observed", "vendor", "plan"
DISTRIBUTED = "distributed"  # DTensor's sharding strategies, a process group (opcov.store.distributed)
_KIND_WORDS = {
    COVERAGE: "a coverage file",
    OPSET: "an op-set file",
    REPORT: "an 'opcov check' report",
    TABLE: "a zoo outcome table",
    BUNDLE: "an opcov bundle",
    OBSERVED: "an observed run",
    VENDOR: "a vendor-test expectations file",
    PLAN: "an 'opcov plan' output",
    DISTRIBUTED: "a DTensor-strategy or process-group file",
}
_SNIFF_BYTES = 64 << 10  # an opcov file says what it is in its first lines (sorted header keys)
_JSON_SNIFF_MAX = 16 << 20  # an observed run or vendor file says what it is in a key: read whole, up to this
_JSON_EVIDENCE = {
    "observed": OBSERVED,
    "vendor_expected": VENDOR,
    "dtensor_sharding": DISTRIBUTED,
    "process_group": DISTRIBUTED,
}


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(_SNIFF_BYTES)
    except OSError:
        return b""


def _is_data(head: bytes) -> bool:
    return head.startswith(b"integrity: ") or re_line(head, b"schema_version: ")


def re_line(head: bytes, start: bytes) -> bool:
    """Whether a line of ``head`` starts with ``start``."""
    return head.startswith(start) or b"\n" + start in head


def _gzip_kind(head: bytes) -> str | None:
    """BUNDLE when ``head`` is gzip data whose first bytes name an opcov bundle (its keys are sorted:
    'opcov_bundle' comes after the small backend record)."""
    import zlib

    try:
        start = zlib.decompressobj(31).decompress(head, 4096)
    except zlib.error:
        return None
    return BUNDLE if b'"opcov_bundle"' in start else None


def _json_kind(path: str | None) -> str | None:
    """OBSERVED, VENDOR or PLAN for a JSON file opcov wrote (the key that says so may lie deep in it)."""
    import json

    if path is None:
        return None
    try:
        if os.path.getsize(path) > _JSON_SNIFF_MAX:
            return None
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    if "max_over_mean" in doc and "shards" in doc:
        return PLAN
    return _JSON_EVIDENCE.get(doc.get("evidence"))  # type: ignore[arg-type]


# 'opcov check --path compile': its first line says 'BACKEND MODE (compile path, COMPILE BACKEND): ...'
_COMPILE_REPORT = re.compile(rb"[A-Za-z0-9_][A-Za-z0-9_.+\-]* [a-z]+ \(compile path, [A-Za-z0-9_.+\-]+\): ")


def what_is(head: bytes, path: str | None = None) -> str | None:
    """The kind of opcov output ``head`` (a file's first bytes; the file at ``path``) is, or None."""
    if _is_data(head):
        if re_line(head, b"kind: opset\n"):
            return OPSET
        if re_line(head, b"evidence: "):
            return COVERAGE
        return None
    if head.startswith(b"# ") and b"\nmodel\tmode\toutcome\t" in head:
        return TABLE
    if head.startswith(b"\x1f\x8b"):
        return _gzip_kind(head)
    if (head.startswith(b"plan ") and b" shards; predicted " in head.split(b"\n", 1)[0]) or head.startswith(
        (b"slices=", b"# Kubernetes Indexed Job written by 'opcov plan ")
    ):
        return PLAN
    text = head.lstrip()
    if (
        text.startswith((b"opcov check: ", b"### opcov check: "))
        or _COMPILE_REPORT.match(text) is not None
        or (text.startswith(b"[") and b'"path": "compile"' in head and b'"compile_backend"' in head)
        or (text.startswith(b"<?xml") and b'<testsuites name="opcov check ' in text[:400])
        or (text.startswith(b"::") and b" title=opcov " in text.split(b"\n", 1)[0])
        or (text.startswith(b"{") and b'"verdicts"' in head and b'"model"' in head)
    ):
        return REPORT
    if text.startswith(b"{"):
        return _json_kind(path)
    return None


def same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` are one file (device and inode, links followed)."""
    try:
        x, y = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


def check_inside(root: str, path: str) -> None:
    """A one-line UsageError unless ``path`` lies inside the folder ``root`` once every link is resolved,
    with no symbolic link between them: a path built from data (a backend, model or mode name) never
    leads out of the folder the user named, and a linked backend folder is never written through.
    ``root`` itself may be a link: the user named it."""
    top = os.path.abspath(root)
    target = os.path.abspath(path)
    rel = os.path.relpath(target, top)
    parts = rel.split(os.sep)
    if rel == os.curdir or os.pardir in parts or os.path.isabs(rel):
        raise UsageError(f"cannot write {path}: it is not inside {root}; a name is data, never a path")
    for depth in range(1, len(parts) + 1):
        here = os.path.join(root, *parts[:depth])
        if os.path.islink(here):
            raise UsageError(
                f"cannot write {path}: {here} is a symbolic link inside {root}; opcov never writes through "
                "links: replace it with a real folder or file"
            )
    real_top = os.path.realpath(top)
    real = os.path.realpath(target)
    if real != real_top and not real.startswith(real_top.rstrip(os.sep) + os.sep):
        raise UsageError(f"cannot write {path}: it resolves to {real}, outside {root}; choose another path")


def check_output(
    path: str,
    *,
    kind: str | None,
    inputs=(),
    flag: str = "--out",
    evidence: str | None = None,
    within: str | None = None,
) -> None:
    """The one guard every output file passes before any work: ``check_writable_file`` (not a folder, a
    link, a device or under /proc); inside the folder ``within`` with no link on the way (where the path
    was built from data); none of the command's ``inputs`` (the same device and inode, links resolved);
    and a file already at ``path`` is opcov's own output of this ``kind`` (for a coverage file, of this
    ``evidence`` when given) or empty. One UsageError line otherwise."""
    check_writable_file(path)
    if within is not None:
        check_inside(within, path)
    for source in inputs:
        if source is None:
            continue
        if same_file(path, source):
            raise UsageError(
                f"{flag} {path} is also an input of this command ({source}); opcov never writes over "
                "what it reads: choose another output path"
            )
    if kind is None or not os.path.exists(path):
        return
    head = _head(path)
    if not head.strip():
        return  # nothing there to lose
    found = what_is(head, path)
    if found == kind and (evidence is None or re_line(head, b"evidence: " + evidence.encode() + b"\n")):
        return
    if found is None:
        there = "a file opcov did not write"
    elif found == kind:
        there = f"{_KIND_WORDS[found]} of other evidence"
    else:
        there = _KIND_WORDS[found]
    raise UsageError(
        f"{flag} {path}: {there} is already there, and this command writes {_KIND_WORDS[kind]}; "
        "opcov replaces only its own output of the same kind: choose another path or remove the file"
    )


# ---------------------------------------------------------------- one writer at a time

LOCK_NAME = ".opcov.lock"
_held: dict[str, int] = {}  # lock files this process holds, and how deep (a holder may call another)


@contextlib.contextmanager
def locked(folder: str, say=None):
    """Held while a command reads, checks and writes files in ``folder`` (an ingest's merge, a merge's or a
    probe's write): an exclusive ``flock`` on ``folder/.opcov.lock``, so two writers that meet there run one
    after the other (the second waits, saying so through ``say``) and neither's data is lost. The lock file
    is removed by its holder; a waiter that then holds a removed file tries again. Re-entrant within a
    process. Where there is no ``fcntl`` (Windows) it holds nothing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on the platforms opcov runs its writers on
        yield
        return
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write in {folder}: {_why(exc)}") from None
    path = os.path.join(folder, LOCK_NAME)
    key = os.path.realpath(path)
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot lock {path}: {_why(exc)}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if say is not None:
                    say(f"opcov: waiting for another opcov writing in {folder} to finish")
                fcntl.flock(fd, fcntl.LOCK_EX)
            mine = os.fstat(fd)
            try:
                there = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                there = None
        except BaseException:
            os.close(fd)
            raise
        if there is not None and (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
            break
        os.close(fd)  # its holder removed it while this process waited: lock the new one
    _held[key] = 1
    try:
        yield
    finally:
        del _held[key]
        try:
            os.remove(path)
        except OSError:
            pass
        os.close(fd)


def save(path: str, content, **rules) -> None:
    """Write ``content`` to ``path`` through the guard: ``check_output`` with ``rules`` (its keywords: kind,
    inputs, flag, evidence, within), refused before any folder is made; then, under the lock of the folder
    it goes in, ``check_output`` again and ``write_atomic``. What every command's output file goes through
    (site pages, written by the thousand into a folder opcov made and checked, go through ``write_new`` /
    ``write_atomic`` instead)."""
    check_output(path, **rules)
    with locked(os.path.dirname(os.path.abspath(path))):
        check_output(path, **rules)
        write_atomic(path, content)
