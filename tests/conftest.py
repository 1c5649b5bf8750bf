"""Shared fixtures: run opcov in a child process (PrivateUse1 can be claimed once per process)."""

import json
import os
import subprocess
import sys
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # keep torch_tpu out of this process


def child_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def run_opcov(*args, timeout=600, **env):
    """``python -m opcov ARGS`` in a fresh process; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "opcov", *args],
        capture_output=True,
        text=True,
        env=child_env(**env),
        timeout=timeout,
        cwd=ROOT,
    )


# Several commands in one child (run_opcov_batch): each through cli.main with sys.argv as 'python -m opcov'
# sets it, its exit code and output kept apart, as run_opcov would give them; the list goes out as JSON.
_BATCH = """\
import contextlib, io, json, os, sys, traceback
from opcov import cli
done = []
for args in json.loads(os.environ["OPCOV_TEST_BATCH"]):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = [sys.argv[0], *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:
            traceback.print_exc()
            code = 1
    done.append([code, out.getvalue(), err.getvalue()])
sys.stdout.write(json.dumps(done))
"""


def run_opcov_batch(commands, timeout=600, **env):
    """``python -m opcov ARGS`` for each ARGS in ``commands``, one after the other in one fresh process
    (one interpreter and torch import for them all, as a zoo worker traces model after model): a
    CompletedProcess for each, in order. For commands that need a child (a trace claims PrivateUse1 for
    its stand-in device) but not a child each."""
    commands = [[str(a) for a in args] for args in commands]
    proc = subprocess.run(
        [sys.executable, "-c", _BATCH],
        capture_output=True,
        text=True,
        env=child_env(OPCOV_TEST_BATCH=json.dumps(commands), **env),
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [
        subprocess.CompletedProcess(["opcov", *args], *done) for args, done in zip(commands, json.loads(proc.stdout))
    ]


def _warn_to_stderr(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def opcov_here(*args, cwd=ROOT, **env):
    """``opcov ARGS`` through ``opcov.cli.main`` in this process, as ``run_opcov`` runs it in a child: the
    exit code and what it wrote to standard output and error (an exception it lets out as a child's
    traceback and exit 1; warnings shown as a fresh interpreter shows them), in ``cwd`` with ``env`` set.
    For a test of what a command says and writes; a test of the process itself (signals, crashes,
    children, imports, PYTHONPATH) runs it in a child. Saves the child's interpreter and imports."""
    import contextlib
    import io
    import traceback

    from opcov import cli

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    os.environ.update({k: v for k, v in env.items() if v is not None})
    sys.argv = [os.path.join(SRC, "opcov", "__main__.py"), *map(str, args)]  # as 'python -m opcov' sets it
    try:
        os.chdir(cwd)
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.resetwarnings()  # a fresh interpreter's filters (pytest records warnings instead)
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            warnings.showwarning = _warn_to_stderr
            try:
                code = cli.main(sys.argv[1:])
            except SystemExit as exc:  # argparse's usage errors, --help and --version
                code = exc.code or 0 if exc.code is None or isinstance(exc.code, int) else 1
                if code == 1 and not isinstance(exc.code, int):
                    print(exc.code, file=sys.stderr)  # as the interpreter prints a message it exits with
            except Exception:  # noqa: BLE001 - a child would print it and exit 1
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    done = subprocess.CompletedProcess(["opcov", *args], code, out.getvalue(), err.getvalue())
    return done


# A Python with PyTorch/XLA (scripts/envs/xla.sh makes .envs/xla; OPCOV_XLA_PYTHON names another): the
# tests that run xla for real are skipped without one, and say so.
XLA_PYTHON = os.environ.get("OPCOV_XLA_PYTHON") or os.path.join(ROOT, ".envs", "xla", "bin", "python")
needs_xla = pytest.mark.skipif(
    not os.path.exists(XLA_PYTHON), reason=f"no Python with PyTorch/XLA at {XLA_PYTHON} (OPCOV_XLA_PYTHON)"
)


def run_xla(*args, timeout=900, **env):
    """``python -m opcov ARGS`` in the Python with PyTorch/XLA, on its CPU client (PJRT_DEVICE=CPU)."""
    return subprocess.run(
        [XLA_PYTHON, "-m", "opcov", *args],
        capture_output=True,
        text=True,
        env=child_env(PJRT_DEVICE="CPU", **env),
        timeout=timeout,
        cwd=ROOT,
    )


# XLA's CPU compiler without its costly optimisation passes, for a test whose xla run compiles many large
# graphs (generate's prefill and decode steps, each a graph): they change neither which ops run nor what
# falls back to CPU, only how fast the compiled code is and its last bits (values are compared within
# tolerance). gpt2's serve run: 192 s of CPU with XLA's defaults, 64 s so. The other xla tests compile
# small graphs and gained nothing (measured), so they keep the defaults.
XLA_QUICK_COMPILE = {
    "XLA_FLAGS": " ".join(
        [
            "--xla_backend_optimization_level=0",
            "--xla_llvm_disable_expensive_passes=true",
            os.environ.get("XLA_FLAGS", ""),
        ]
    ).strip()
}


@pytest.fixture
def opcov():
    return run_opcov


# `opcov scan` records what each of ~2,600 composite or differentiable ops reaches: minutes of CPU on
# two cores, a data job (the committed files come from it). A test's scan runs this child instead of
# `python -m opcov`: the same command line, with the reach recorded (for real, through reach.record and
# its cache) for the ops named in OPCOV_TEST_REACH_ONLY alone; the others' reach says "not recorded".
_REACH_ONLY = """\
import json, os
from opcov.scan import reach, registered
only = set(json.loads(os.environ["OPCOV_TEST_REACH_ONLY"]))
registered.record = lambda names, catalog, zoo=None: reach.record([n for n in names if n in only], catalog, zoo)
from opcov.cli import main
raise SystemExit(main())
"""


# The ops whose reach the tests' scans record, one set so that it is recorded once a run (into the shared
# reach_cache): those test_scan_paths reads and nn-convnet's inference ops (test_neuron_path), with what
# they reach forward, in turn (torch 2.13's recording; convolution_overrideable is where a PrivateUse1
# device's _convolution goes). An op left out is 'unresolved' in the tests' scans, never wrongly resolved.
SCAN_REACH = (
    "aten::_convolution",
    "aten::_softmax",
    "aten::_softmax.out",
    "aten::addmm",
    "aten::addmm.out",
    "aten::alias",
    "aten::as_strided",
    "aten::as_strided_",
    "aten::convolution",
    "aten::convolution_overrideable",
    "aten::empty.memory_format",
    "aten::matmul",
    "aten::max_pool2d_with_indices",
    "aten::max_pool2d_with_indices.out",
    "aten::mean.dim",
    "aten::mean.out",
    "aten::mkldnn_convolution",
    "aten::mm",
    "aten::mm.out",
    "aten::native_batch_norm",
    "aten::relu",
    "aten::resize_",
    "aten::softmax.int",
    "aten::squeeze.dim",
    "aten::t",
    "aten::transpose.int",
    "aten::unsqueeze",
    "aten::view",
)


def run_scan(reach_only, *args, cwd=ROOT, timeout=1500, **env):
    """``opcov scan ARGS`` in a fresh process, recording the reach of the ops in ``reach_only`` alone."""
    return subprocess.run(
        [sys.executable, "-c", _REACH_ONLY, "scan", *args],
        capture_output=True,
        text=True,
        env=child_env(OPCOV_TEST_REACH_ONLY=json.dumps(sorted(reach_only)), **env),
        timeout=timeout,
        cwd=cwd,
    )


@pytest.fixture(scope="session")
def shared_tmp(tmp_path_factory):
    """A folder for the whole test run, shared by the xdist workers (the folder above each worker's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def reach_cache(shared_tmp):
    """One cache folder for the whole test run (the op catalogue, each op's reach), shared by the xdist
    workers, so each recording runs once: opcov's cache lock makes the others wait."""
    folder = shared_tmp / "xdg-cache-shared"
    folder.mkdir(exist_ok=True)
    return str(folder)


def made_once(shared_tmp, name: str, make) -> str:
    """The folder ``shared_tmp/name``, filled by ``make(folder)`` once in the test run: the first worker to
    ask makes it, one asking meanwhile waits on a lock, the others read what it made (never change it)."""
    import fcntl
    import shutil

    folder = os.path.join(str(shared_tmp), name)
    with open(folder + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(folder, ".made")):
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            make(folder)
            open(os.path.join(folder, ".made"), "w").close()
    return folder


# A probe that passes everywhere (every op through the CPU fallback) on a few OpInfos: the whole run that
# resumed, sharded and planned runs must reproduce (test_probe, test_plan), made once a test run.
WORKING = {"kernels": {}, "fallback": "cpu"}
WORKING_OPS = "^(add|mul|sub|neg|clone|abs)$"
WORKING_ARGS = ("--import", "opcov.sources.pybackend", "--ops", WORKING_OPS, "--dtypes", "float32")


@pytest.fixture(scope="session")
def whole_probe(shared_tmp) -> str:
    """The path of the working probe's file (its times file beside it)."""

    def make(folder):
        out = os.path.join(folder, "whole.yaml")
        proc = run_opcov("probe", "opcovtest", *WORKING_ARGS, "--out", out, OPCOV_PYBACKEND_SPEC=json.dumps(WORKING))
        assert proc.returncode == 0, proc.stderr[-3000:]

    return os.path.join(made_once(shared_tmp, "whole-probe", make), "whole.yaml")


def trace_factories(root, module: str, source: str, names, mode: str) -> dict:
    """{name: op-set path} of each factory ``module:name`` (``source`` written to root/module.py), traced by
    the real 'opcov trace' in ``mode``, all in one child; a trace that fails fails the test with its output."""
    (root / f"{module}.py").write_text(source)
    out = {name: str(root / name / f"{mode}.yaml") for name in names}
    commands = [("trace", f"{module}:{name}", "--mode", mode, "--out", path) for name, path in out.items()]
    # the batch's process traces each factory itself, marked (OPCOV_TRACE_ISOLATED, opcov.cli.trace) as the
    # child 'opcov trace' runs a factory in, which would import torch once per trace (that child's isolation
    # is tested in test_data_safety and test_run_child); the op sets are those of separate runs (compared)
    for r in run_opcov_batch(commands, PYTHONPATH=str(root), OPCOV_TRACE_ISOLATED="1"):
        assert r.returncode == 0, r.stdout + r.stderr
    return out


def check_verdict(path, backend) -> dict:
    """The first verdict of 'opcov check PATH -b BACKEND --no-replay --format json' (exit 0 or 1)."""
    r = opcov_here("check", str(path), "-b", backend, "--no-replay", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)["verdicts"][0]


def load_yaml(path):
    """The document PyYAML's safe loader reads, with libyaml's parser where PyYAML has it (the same
    document; the pure-Python parser took ~10 s of CPU on the bundled cpu probed file, libyaml's ~2 s)."""
    import yaml

    with open(path) as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def dumps(obj):
    return json.dumps(obj, sort_keys=True)


# A slice of the bundled zoo (~600 architectures: rendering or checking each in a test is a data
# job, not a test): text, vision, audio, MoE, RNN and conv models, which between them get runs,
# fails and unknown verdicts on the bundled backends.
SLICE = (
    "bert",
    "gpt2",
    "llama",
    "mixtral",
    "nn-convnet",
    "nn-lstm",
    "nn-transformer",
    "t5",
    "vit",
    "wav2vec2",
    "whisper",
)


def bundled_slice(root, models=SLICE) -> str:
    """A coverage folder under ``root``: every bundled backend's data, the Python-name index and the op
    sets of ``models``, copied."""
    import shutil

    src = os.path.join(ROOT, "coverage")
    cov = os.path.join(str(root), "coverage")
    os.makedirs(cov, exist_ok=True)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name == "models" or name == "zoo":
            continue
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(cov, name), ignore=shutil.ignore_patterns("*.journal.jsonl"))
        else:
            shutil.copy(path, cov)
    for name in models:
        shutil.copytree(os.path.join(src, "models", name), os.path.join(cov, "models", name))
    return cov


# a vendor's source checkout in miniature (test_vendor_tests): its *_test.py files are parsed, never run
collect_ignore = ["data/vendortests"]


# The test files whose tests run probes, scans, traces, zoo runs or models in child processes: each test in
# them is marked 'slow', so that `pytest -m "not slow"` is a quick run without them (CI runs both sets).
SLOW_FILES = frozenset(
    {
        "test_branches.py",
        "test_compile_probe.py",
        "test_data_safety.py",
        "test_data_safety_writers.py",
        "test_distributed.py",
        "test_isolation.py",
        "test_layouts.py",
        "test_neuron_path.py",
        "test_observed.py",
        "test_observed_serve.py",
        "test_ondevice.py",
        "test_patched_above.py",
        "test_plan.py",
        "test_probe.py",
        "test_probe_depth.py",
        "test_reality.py",
        "test_replay_calls.py",
        "test_replay_ondevice.py",
        "test_run_child.py",
        "test_scan_paths.py",
        "test_serve.py",
        "test_sigclass.py",
        "test_trace.py",
        "test_zoo.py",
    }
)

# The costly files, slow or not, costliest first (seconds their tests took in a whole run on 2 cores, without
# PyTorch/XLA as CI runs it, from --durations=0): collected first, so that xdist, which scripts/test.sh tells
# to schedule whole files in collection order (--dist loadfile --no-loadscope-reorder), starts them first and
# the last files each worker starts are short ones: both finish together. Left to itself xdist starts the
# files with the most tests first, and these few-test files last; alphabetical order put test_site_browser.py
# and test_wheel.py (a minute each) among the last. Files that share a recording made once a run (the reach
# of test_scan_paths.py and test_neuron_path.py, the whole probe of test_probe.py and test_plan.py) stand
# apart, so the second starts once the first has made it instead of waiting on its lock with a core idle.
COSTLY_FIRST = (
    "test_probe_depth.py",  # 150 to 250
    "test_probe.py",  # 195, makes whole_probe
    "test_trace.py",  # 160
    "test_reality.py",  # 135
    "test_zoo.py",  # 105
    "test_data_safety.py",  # 100
    "test_observed_serve.py",  # 90
    "test_run_child.py",  # 80
    "test_scan_paths.py",  # 50, records the tests' reach
    "test_data_safety_writers.py",  # 70
    "test_site_browser.py",  # 60
    "test_wheel.py",  # 60
    "test_sigclass.py",  # 50
    "test_serve.py",  # 45
    "test_neuron_path.py",  # 45, reads the reach
    "test_site.py",  # 35
    "test_replay_calls.py",  # 35
    "test_bundle.py",  # 35
    "test_consistency.py",  # 30
    "test_observed.py",  # 30
    "test_compile_probe.py",  # 30
    "test_isolation.py",  # 30
    "test_lineyaml.py",  # 25
    "test_plan.py",  # 25, reads whole_probe
    "test_data_lint.py",  # 20
    "test_branches.py",  # 20
    "test_recall.py",  # 20
    "test_distributed.py",  # 20
    "test_data_safety_children.py",  # 20
    "test_patched_above.py",
    "test_ondevice.py",  # these three run PyTorch/XLA, where it is there, at a cost
    "test_replay_ondevice.py",
    "test_layouts.py",
)


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    gone = [name for name in SLOW_FILES | set(COSTLY_FIRST) if not os.path.exists(os.path.join(here, name))]
    if gone:
        raise pytest.UsageError(
            f"tests/conftest.py: SLOW_FILES or COSTLY_FIRST names files not there: {', '.join(gone)}"
        )
    unordered = sorted(SLOW_FILES - set(COSTLY_FIRST))
    if unordered:
        raise pytest.UsageError(f"tests/conftest.py: COSTLY_FIRST leaves out slow files: {', '.join(unordered)}")
    rank = {name: i for i, name in enumerate(COSTLY_FIRST)}
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the other files keep their order
