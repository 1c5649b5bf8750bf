"""Bounded reading of untrusted input (docs/data-safety.md, issue 43): a bundle is size-capped before and
while it is decompressed, its JSON is strict (a key given twice is named) and depth-limited, every
field is checked before the first byte is written; the vendor-test reader caps a file's size, its
encoding and how deep its syntax nests; 'opcov plan' deals to no more shards than there are groups.
Each case is one line and exit 2 (or, for plan, a note), never a traceback, in bounded memory."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import shutil
import subprocess
import sys
import zlib

import pytest
from conftest import ROOT, child_env, opcov_here
from test_bundle import xla_coverage
from test_data_safety import one_line_error
from test_data_safety_writers import _tree

from opcov.errors import DataError
from opcov.store import bundle, strictjson

XLA = os.path.join(ROOT, "coverage", "xla")
PROBED = "probed-torch-2.9.0+cu128-torch_xla-2.9.0.yaml"
VENDOR = os.path.join(ROOT, "tests", "data", "vendortests")


LIMIT = 3 << 30  # address space of a measured child: a runaway gets a MemoryError, not the OOM killer


def run_measured(*args, timeout=300):
    """``opcov ARGS`` in a child limited to LIMIT bytes of address space; (CompletedProcess, its peak
    resident memory in MB). The peak is the child's own (VmHWM), not ``ru_maxrss``: Linux carries the
    forking parent's high-water mark into that across exec, so a pytest worker that had imported torch
    made every child look 660 MB large."""
    code = (
        "import resource, runpy, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({LIMIT}, {LIMIT}))\n"
        "sys.argv = ['opcov', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('opcov', run_name='__main__')\n"
        "finally:\n"
        "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "    print('peak', int(hwm) // 1024, file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=child_env(), timeout=timeout, cwd=ROOT
    )
    lines = proc.stderr.splitlines()
    peak = int(lines[-1].split()[1])
    proc.stderr = "\n".join(lines[:-1]) + ("\n" if len(lines) > 1 else "")
    return proc, peak


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    t = tmp_path_factory.mktemp("bounds")
    out = str(t / "xla.gz")
    assert opcov_here("bundle", os.path.join(XLA, PROBED), "--source", "lab", "--out", out).returncode == 0
    return out


@pytest.fixture
def cov(tmp_path):
    return pathlib.Path(xla_coverage(tmp_path))


def _payload(src: str) -> bytes:
    return gzip.decompress(open(src, "rb").read())


def _ingest_refused(bad: str, cov, *says):
    before = _tree(cov)
    proc, peak = run_measured("ingest", bad, "--coverage", str(cov))
    one_line_error(proc, *says)
    assert _tree(cov) == before  # nothing written, not even part of it
    return peak


# ---------------------------------------------------------------- bundles


def test_a_gzip_bomb_is_refused_after_reading_at_most_the_cap(tmp_path, cov):
    """Issue 43: a 2.3 MB gzip expanding to 2.25 GiB took 6.9 GB. Now it is refused once what it inflates
    to passes the cap, in bounded memory."""
    bomb = tmp_path / "bomb.gz"
    block, blocks = b"a" * (16 << 20), 128  # 2 GiB
    z = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: a full flush makes a block repeatable as it is
    head = z.compress(b'{"opcov_bundle": 1, "text": "') + z.flush(zlib.Z_FULL_FLUSH)
    once = z.compress(block) + z.flush(zlib.Z_FULL_FLUSH)
    tail = z.compress(b'"}') + z.flush()
    crc = zlib.crc32(b'{"opcov_bundle": 1, "text": "')
    for _ in range(blocks):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(b'"}', crc)
    size = 31 + len(block) * blocks
    with open(bomb, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + head + once * blocks + tail)
        f.write(crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little"))
    assert bomb.stat().st_size < 3 << 20
    peak = _ingest_refused(str(bomb), cov, "inflates to over", "not read further")
    assert peak < 400, peak


def test_a_bundle_too_large_to_be_one_is_refused_unread(tmp_path, cov):
    big = tmp_path / "big.gz"
    with open(big, "wb") as f:
        f.truncate(bundle.MAX_BUNDLE_BYTES + 1)  # sparse: no disk used
    _ingest_refused(str(big), cov, "over the", "not read")


@pytest.mark.parametrize(
    "name,make,says",
    [
        ("200,000 nested arrays", lambda p: b"[" * 200_000 + b"]" * 200_000, "nested deeper than 100 levels"),
        (
            "a key given twice",
            lambda p: p.replace(b'"kind": "probed"', b'"kind": "probed", "kind": "observed"', 1),
            "key 'kind' given twice",
        ),
        ("NaN", lambda p: p.replace(b'"bytes": ', b'"bytes": NaN, "x": ', 1), "NaN is not a number JSON allows"),
        ("not UTF-8", lambda p: b"\xff" + p, "not UTF-8"),
        ("ten million arrays", lambda p: b"[" + b"[]," * 10_000_000 + b"[]]", "JSON arrays and objects"),
        ("data after the stream", None, "bytes after the compressed data"),
        ("empty", lambda p: b"", "holds nothing"),
    ],
)
def test_hostile_json_in_a_bundle_is_one_line(made, tmp_path, cov, name, make, says):
    bad = tmp_path / "bad.gz"
    if make is None:
        bad.write_bytes(open(made, "rb").read() + b"trailing")
    else:
        bad.write_bytes(gzip.compress(make(_payload(made))))
    peak = _ingest_refused(str(bad), cov, says)
    assert peak < 600, (name, peak)


def _edited(made: str, dst, change) -> None:
    b = json.loads(_payload(made))
    change(b)
    dst.write_bytes(gzip.compress(json.dumps(b).encode()))


@pytest.mark.parametrize(
    "change,says",
    [
        (lambda b: b.update(times="fast"), "bundle field 'times' missing or not dict"),
        (lambda b: b.update(times={"g": "1"}), "group 'g' has '1'"),
        (lambda b: b.update(times={"g": -1}), "group 'g' has '-1'"),
        (lambda b: b.update(times={"g": True}), "group 'g' has 'True'"),
        (lambda b: b.update(bytes=True), "bundle field 'bytes' missing or not int"),
        (lambda b: b.update(sha256="x" * 64), "not a SHA-256"),
        (lambda b: b["provenance"].update(torch=2.9), "'provenance.torch' is not text"),
        (lambda b: b["provenance"].update(host=["x"]), "'provenance.host' is not a mapping"),
        (lambda b: b["backend"].update(version=["2"]), "'backend.version' is not text"),
        (lambda b: b.update(extra=1), "'extra' unknown to this opcov"),
        (lambda b: b.update(kind=["probed"]), "bundle field 'kind' missing or not str"),
    ],
)
def test_every_field_is_checked_before_the_first_byte_is_written(made, tmp_path, cov, change, says):
    """Issue 43: a 'times' field of the wrong type was a traceback after the snapshot was written (a partial
    ingest). Now the whole bundle is checked first."""
    bad = tmp_path / "bad.gz"
    _edited(made, bad, change)
    _ingest_refused(str(bad), cov, says)


def test_good_times_arrive_with_the_snapshot(made, tmp_path, cov):
    good = tmp_path / "good.gz"
    _edited(made, good, lambda b: b.update(times={"aten::abs|float32": 1.5}))
    proc = opcov_here("ingest", str(good), "--coverage", str(cov))
    assert proc.returncode == 0, proc.stderr
    times = json.load(open(cov / "xla" / (PROBED + ".times.json")))
    assert times["groups"] == {"aten::abs|float32": 1.5}


def test_strict_json_in_process():
    assert strictjson.loads(b'{"a": [1, {"b": 2}]}', "f") == {"a": [1, {"b": 2}]}
    for blob, says in (
        ('{"a": 1, "b": {"c": 1, "c": 2}}', "key 'c' given twice"),
        ("[Infinity]", "not valid JSON"),
        ("[" * 101 + "]" * 101, "deeper than 100"),
        ("[" * 5000 + "]" * 5000, "deeper than 100"),
    ):
        with pytest.raises(DataError, match=says):
            strictjson.loads(blob, "f")
    assert strictjson.depth([[[]]]) == 3 and strictjson.depth(1) == 0


# ---------------------------------------------------------------- the vendor-test reader


def _checkout(tmp_path, ops_test: bytes):
    v = tmp_path / "V"
    shutil.copytree(VENDOR, v)
    (v / "tests" / "ops_test.py").write_bytes(ops_test)
    return v


@pytest.mark.parametrize(
    "name,source,says,limit_mb",
    [
        ("random bytes", bytes(range(128, 256)) * 40, "not UTF-8 text", 200),
        ("a NUL byte", b"x = 1\0\n", "not Python this opcov can parse", 200),
        ("100k nested unary operators", b"x = " + b"-" * 100_000 + b"1\n", "nested too deeply", 300),
        ("100k attribute chain", b"x = a" + b".b" * 100_000 + b"\n", "nested too deeply", 300),
        ("a 150-level expression", b"x = " + b"-" * 150 + b"1\n", "nested over 100 levels", 200),
        ("200k additions", b"x = " + b"+".join([b"a"] * 200_000) + b"\n", "nested too deeply", 700),
    ],
)
def test_a_hostile_test_file_is_one_line(tmp_path, name, source, says, limit_mb):
    """Issue 43: random bytes were a UnicodeDecodeError, 100k nested unary operators or attribute chains a
    RecursionError or MemoryError."""
    v = _checkout(tmp_path, source)
    proc, peak = run_measured(
        "expect", "tpu", "--vendor-tests", str(v), "--commit", "abc1234", "--out", str(tmp_path / "o.json")
    )
    one_line_error(proc, "ops_test.py", says)
    assert peak < limit_mb, (name, peak)
    assert not (tmp_path / "o.json").exists()


def test_a_huge_test_file_is_refused_before_it_is_read(tmp_path):
    """Issue 43: a 195 MB source took 4.7 GB. The size cap refuses it unread (a sparse file: no disk used)."""
    v = _checkout(tmp_path, b"")
    with open(v / "tests" / "ops_test.py", "wb") as f:
        f.truncate(195 << 20)
    proc, peak = run_measured(
        "expect", "tpu", "--vendor-tests", str(v), "--commit", "abc1234", "--out", str(tmp_path / "o.json")
    )
    one_line_error(proc, "204,472,320 bytes, over the")
    assert peak < 200, peak


# ---------------------------------------------------------------- plan


def test_plan_deals_to_no_more_shards_than_groups(tmp_path):
    """Issue 43: 'plan --shards 1000000000' grew to 20.5 GB. The shards are bounded by the groups there are."""
    proc, peak = run_measured(
        "plan", "opcovtest", "--import", "opcov.sources.pybackend", "--ops", "^(abs|neg)$", "--dtypes", "float32",
        "--shards", "1000000000", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    fig = json.loads(proc.stdout)
    assert len(fig["shards"]) == fig["groups"] >= 1
    assert "--shards 1000000000 is more than the" in proc.stderr and "Traceback" not in proc.stderr
    assert peak < 1000, peak


def test_a_shard_beyond_the_groups_is_empty_and_the_deal_unchanged():
    """'probe --shard I/N' deals as 'plan' does: shard I of a billion holds what shard I of five does, and
    no billion-entry list is made (in a child limited to LIMIT bytes)."""
    code = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({LIMIT}, {LIMIT}))\n"
        "from opcov.probe import plan\n"
        "class G:\n"
        "    def __init__(self, gid): self.id = gid\n"
        "groups = [G(f'g{i}') for i in range(5)]\n"
        "times = {f'g{i}': float(i) for i in range(5)}\n"
        "for i in range(1, 6):\n"
        "    assert [g.id for g in plan.pick(groups, times, (i, 10**9))] == [g.id for g in plan.pick(groups, times, (i, 5))]\n"
        "assert plan.pick(groups, times, (6, 10**9)) == [] and plan.pick(groups, times, (10**9, 10**9)) == []\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=120)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr[-2000:]


def test_a_times_file_is_read_strictly(tmp_path):
    from opcov.errors import UsageError
    from opcov.probe import plan

    t = tmp_path / "t.json"
    t.write_text('{"groups": {"a": 1, "a": 2}}')
    with pytest.raises(UsageError, match="key 'a' given twice"):
        plan.load_times(str(t))
    t.write_text("[" * 10000 + "]" * 10000)
    with pytest.raises(UsageError, match="nested deeper"):
        plan.load_times(str(t))
