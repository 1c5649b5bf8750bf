"""Tests for opcov.sources.pybackend, the planted pure-Python PrivateUse1 backend.

PrivateUse1 can be claimed only once per process, so every check runs a small
snippet in a child Python with its own ``OPCOV_PYBACKEND_SPEC``.  Several
checks share one child (module-scoped fixtures) to keep the file fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT = 120  # generous: only reached if something is badly wrong

PRELUDE = """
import json, torch
import opcov.sources.pybackend as pb
dev = pb.device()
res = {}
def err(fn):
    try:
        fn()
    except BaseException as e:
        return [type(e).__name__, str(e)]
    return None

"""


def _env(spec) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env.pop("OPCOV_PYBACKEND_SPEC", None)
    if spec is not None:
        env["OPCOV_PYBACKEND_SPEC"] = spec if isinstance(spec, str) else json.dumps(spec)
    return env


def _popen(code: str, spec=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        env=_env(spec),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(code: str, spec=None) -> subprocess.CompletedProcess:
    proc = _popen(code, spec)
    out, errtxt = proc.communicate(timeout=CHILD_TIMEOUT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, errtxt)


def _results(code: str, spec=None) -> dict:
    """Run ``code`` (which fills ``res``) and return ``res`` decoded."""
    proc = _run(textwrap.dedent(code) + "\nprint('RESULT ' + json.dumps(res))\npb.end_process(0)\n", spec)
    assert proc.returncode == 0, proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


# ---------------------------------------------------------------- fixtures

PLANTED_SPEC = {
    "kernels": {
        "aten::add.out": "pass",
        "aten::mul.out": "small_error",
        "aten::sub.out": "large_error",
        "aten::mm": "low_precision",
        "aten::addmm": "pass",
        "aten::sum.dim_IntList": "pass",
        "aten::neg": "raise",
        "aten::exp": "oom",
    },
    "autograd": ["aten::addmm"],
    "fallback": "cpu",
}


@pytest.fixture(scope="module")
def planted() -> dict:
    """One child with numeric plants, raise/oom plants, autograd and CPU fallback."""
    code = """
    torch.manual_seed(0)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    m = torch.randn(5, 3)
    da, db = a.to(dev), b.to(dev)
    res["roundtrip"] = torch.equal(da.cpu(), a)
    res["device"] = str(da.device)
    res["add_equal"] = torch.equal((da + db).cpu(), a + b)
    r = a * b
    d = (da * db).cpu()
    big = r.abs() > 1e-3
    res["mul_rel_err"] = ((d - r).abs()[big] / r.abs()[big]).tolist()
    res["sub_diff"] = ((da - db).cpu() - (a - b)).tolist()
    r = a @ m
    d = torch.mm(da, m.to(dev)).cpu()
    res["mm_equal"] = torch.equal(d, r)
    res["mm_is_bf16_rounded"] = torch.equal(d, r.to(torch.bfloat16).float())
    res["mm_close_bf16"] = torch.allclose(d, r, rtol=1.6e-2, atol=1e-2)
    res["neg"] = err(lambda: torch.neg(da))
    res["exp"] = err(lambda: torch.exp(da))
    res["exp_is_oom_type"] = False
    try:
        torch.exp(da)
    except torch.OutOfMemoryError:
        res["exp_is_oom_type"] = True
    # no kernel for abs/sin: the CPU fallback runs them, incl. out= and in-place
    res["abs_fallback"] = torch.equal(torch.abs(da).cpu(), a.abs())
    o = torch.empty(0, device=dev)
    torch.sin(da, out=o)
    res["sin_out"] = [list(o.shape), torch.allclose(o.cpu(), a.sin())]
    x = da.clone()
    x.cos_()
    res["cos_inplace"] = torch.allclose(x.cpu(), a.cos())
    v = da.clone()
    v[1].fill_(3.0)
    res["view_write"] = v.cpu()[1].tolist() == [3.0] * 5
    # a Python number for a Tensor argument (remainder.Scalar -> remainder.Tensor with a wrapped number,
    # which the boxed fallback receives as an int): computed, with CPU's type promotion
    i32 = torch.arange(6, dtype=torch.int32)
    res["wrapped_numbers"] = [torch.equal((i32.to(dev) % 3).cpu(), i32 % 3),
                              torch.equal((i32.to(dev) % 2.5).cpu(), i32 % 2.5),
                              torch.equal(torch.remainder(da, 0.7).cpu(), torch.remainder(a, 0.7))]
    # autograd kernel on addmm: dispatch table entry and correct gradients
    table = torch._C._dispatch_dump_table("aten::addmm").splitlines()
    res["addmm_autograd_line"] = [ln for ln in table if ln.startswith("AutogradPrivateUse1:")][0]
    table = torch._C._dispatch_dump_table("aten::mm").splitlines()
    res["mm_autograd_line"] = [ln for ln in table if ln.startswith("AutogradPrivateUse1:")][0]
    bias, w = torch.randn(3), torch.randn(5, 3)
    xs = [t.to(dev).requires_grad_() for t in (bias, a, w)]
    cs = [t.clone().requires_grad_() for t in (bias, a, w)]
    out = torch.addmm(*xs, beta=2.0, alpha=0.5)
    res["addmm_grad_fn"] = type(out.grad_fn).__name__
    out.sum().backward()
    torch.addmm(*cs, beta=2.0, alpha=0.5).sum().backward()
    res["addmm_grads_ok"] = [
        t.grad.device.type == dev.type and torch.allclose(t.grad.cpu(), c.grad, atol=1e-6)
        for t, c in zip(xs, cs)
    ]
    """
    return _results(code, PLANTED_SPEC)


@pytest.fixture(scope="module")
def default() -> dict:
    """One child with no spec in the environment: DEFAULT_SPEC."""
    code = """
    torch.manual_seed(0)
    res["spec"] = pb.current_spec()
    res["default_spec"] = pb.DEFAULT_SPEC
    res["plumbing"] = list(pb.PLUMBING_OPS)
    res["spec_json_roundtrip"] = json.loads(pb.spec_json(pb.DEFAULT_SPEC)) == pb.DEFAULT_SPEC
    a, b, m = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4, 4)
    da, db = a.to(dev), b.to(dev)
    e = torch.empty(2, 3, device=dev)
    res["empty"] = [str(e.device), list(e.shape), list(e.cpu().shape)]
    res["add"] = torch.equal((da + db).cpu(), a + b)
    res["mul"] = torch.equal((da * db).cpu(), a * b)
    res["mm"] = torch.allclose(torch.mm(da, m.to(dev)).cpu(), a @ m)
    res["relu"] = torch.equal(torch.relu(da).cpu(), a.relu())
    res["sum"] = torch.allclose(da.sum(1).cpu(), a.sum(1))
    res["item"] = da[1, 2].item() == a[1, 2].item()
    res["str_cpu"] = str(da.cpu()) == str(a)
    # backward through planted ops (relu has the spec's autograd kernel)
    xd = torch.randn(3, 4, device=dev, requires_grad=True)
    torch.relu(torch.mm(xd, m.to(dev)) * 2.0).sum().backward()
    xc = xd.detach().cpu().requires_grad_()
    torch.relu(torch.mm(xc, m) * 2.0).sum().backward()
    res["grad_device"] = str(xd.grad.device)
    res["grad_ok"] = torch.allclose(xd.grad.cpu(), xc.grad, atol=1e-6)
    table = torch._C._dispatch_dump_table("aten::relu").splitlines()
    res["relu_autograd_line"] = [ln for ln in table if ln.startswith("AutogradPrivateUse1:")][0]
    # the default CPU fallback is disabled: ops without a kernel raise
    res["abs"] = err(lambda: torch.abs(da))
    """
    return _results(code, None)


# ---------------------------------------------------------------- planted kernels


def test_pass_kernel_is_exact(planted):
    assert planted["device"] == "opcovtest:0"
    assert planted["roundtrip"]
    assert planted["add_equal"]


def test_small_error_is_relative_1e3(planted):
    errs = planted["mul_rel_err"]
    assert errs
    assert all(5e-4 < e < 2e-3 for e in errs)


def test_large_error_adds_one(planted):
    flat = [v for row in planted["sub_diff"] for v in row]
    assert all(abs(v - 1.0) < 1e-5 for v in flat)


def test_low_precision_rounds_through_bfloat16(planted):
    assert not planted["mm_equal"]
    assert planted["mm_is_bf16_rounded"]
    assert planted["mm_close_bf16"]


def test_raise_kernel(planted):
    assert planted["neg"] == ["RuntimeError", "opcovtest: planted error in aten::neg"]


def test_oom_kernel(planted):
    kind, msg = planted["exp"]
    assert kind == "OutOfMemoryError"
    assert "out of memory" in msg
    assert planted["exp_is_oom_type"]


# ---------------------------------------------------------------- fatal plants


def _fatal_spec(behaviour: str) -> dict:
    return {"kernels": {"aten::neg": behaviour}, "fallback": None}


FATAL_CODE = """
x = torch.ones(3).to(dev)
print("READY", flush=True)
torch.neg(x)
print("SURVIVED", flush=True)
"""


@pytest.mark.parametrize("behaviour, sig", [("abort", signal.SIGABRT), ("segfault", signal.SIGSEGV)])
def test_fatal_kernel_kills_child(behaviour, sig):
    proc = _run(FATAL_CODE, _fatal_spec(behaviour))
    assert "READY" in proc.stdout, proc.stderr
    assert "SURVIVED" not in proc.stdout
    assert proc.returncode == -sig


def test_hang_kernel_is_killed_by_timeout():
    proc = _popen(FATAL_CODE, _fatal_spec("hang"))
    try:
        assert proc.stdout.readline().strip() == "READY"
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL


# ---------------------------------------------------------------- fallbacks


def test_cpu_fallback_runs_ops_without_kernel(planted):
    assert planted["abs_fallback"]
    assert planted["sin_out"] == [[4, 5], True]
    assert planted["cos_inplace"]
    assert planted["view_write"]
    assert planted["wrapped_numbers"] == [True, True, True]


def test_the_fused_lstm_and_gru_cells_cpu_lacks_are_computed_as_cuda_does():
    # off CPU, aten::lstm takes the fused cell (_thnn_fused_lstm_cell), which CPU has no kernel for: the
    # stand-in computes it, forward and backward, and agrees with CPU's own (unfused) LSTM
    res = _results(
        """
    torch.manual_seed(0)
    lstm, xs = torch.nn.LSTM(4, 5), torch.randn(6, 2, 4)
    out_c = lstm(xs)[0]
    out_c.sum().backward()
    grad_c = lstm.weight_ih_l0.grad.clone()
    lstm.zero_grad()
    lstm.to(dev)
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = set()
    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func._schema.name)
            return func(*args, **(kwargs or {}))
    with Seen():
        out_d = lstm(xs.to(dev))[0]
        out_d.sum().backward()
    res["lstm"] = [torch.allclose(out_d.cpu(), out_c.detach(), atol=1e-6),
                   torch.allclose(lstm.weight_ih_l0.grad.cpu(), grad_c, atol=1e-5)]
    # the GRU's fused cell likewise, against CPU's own GRU: output, and both weights' and bias' grads
    gru = torch.nn.GRU(4, 5)
    out_c = gru(xs)[0]
    (out_c * out_c).sum().backward()
    grads_c = [p.grad.clone() for p in gru.parameters()]
    gru.zero_grad()
    gru.to(dev)
    with Seen():
        out_d = gru(xs.to(dev))[0]
        (out_d * out_d).sum().backward()
    res["gru"] = [torch.allclose(out_d.cpu(), out_c.detach(), atol=1e-6)] + [
        torch.allclose(p.grad.cpu(), g, atol=1e-5) for p, g in zip(gru.parameters(), grads_c)]
    res["ops"] = sorted(n for n in seen if "_cell" in n)
    # interpreter teardown after a backward through the CPU fallback may abort ("terminate called
    # without an active exception", seen here with torch 2.13): leave without it, as the probe's workers do
    import os, sys
    print("RESULT " + json.dumps(res))
    sys.stdout.flush()
    os._exit(0)
    """,
        spec={"kernels": {}, "fallback": "cpu"},
    )
    assert res["lstm"] == [True, True]
    assert res["gru"] == [True] * 5
    assert {
        "aten::_thnn_fused_lstm_cell",
        "aten::_thnn_fused_lstm_cell_backward_impl",
        "aten::_thnn_fused_gru_cell",
        "aten::_thnn_fused_gru_cell_backward",
    } <= set(res["ops"])


def test_raise_fallback(default):
    kind, msg = default["abs"]
    assert kind == "NotImplementedError"
    assert "aten::abs" in msg and "CPU fallback is disabled" in msg


def test_null_fallback_gives_dispatcher_error_and_spec_file_works(tmp_path):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"kernels": {"aten::add.out": "pass"}, "fallback": None}))
    res = _results(
        """
        res["spec"] = pb.current_spec()
        x = torch.ones(3).to(dev)
        res["add"] = (x + x).cpu().tolist()
        res["abs"] = err(lambda: torch.abs(x))
        """,
        str(spec_file),
    )
    assert res["spec"]["kernels"] == {"aten::add.out": "pass"}
    assert res["spec"]["fallback"] is None
    assert res["add"] == [2.0, 2.0, 2.0]
    kind, msg = res["abs"]
    assert kind == "NotImplementedError"
    assert "Could not run 'aten::abs" in msg
    assert "opcovtest" in msg


# ---------------------------------------------------------------- autograd


def test_autograd_kernel_is_registered_and_correct(planted):
    line = planted["addmm_autograd_line"]
    assert line.endswith("[kernel]"), line
    assert "pybackend.py" in line
    assert planted["mm_autograd_line"].endswith("[autograd kernel]")
    assert planted["addmm_grad_fn"] == "_CpuGradFunctionBackward"
    assert planted["addmm_grads_ok"] == [True, True, True]


# ---------------------------------------------------------------- default spec


def test_default_spec_is_installed_without_env(default):
    assert default["spec"]["name"] == "opcovtest"
    assert default["spec"]["fallback"] == "raise"
    assert set(default["spec"]["kernels"]) == set(default["default_spec"]["kernels"])
    assert default["spec_json_roundtrip"]
    assert "aten::empty.memory_format" in default["plumbing"]
    assert not set(default["plumbing"]) & set(default["spec"]["kernels"])


def test_default_spec_computes_correctly(default):
    assert default["empty"] == ["opcovtest:0", [2, 3], [2, 3]]
    for key in ("add", "mul", "mm", "relu", "sum", "item", "str_cpu"):
        assert default[key], key


def test_default_spec_backward(default):
    assert default["grad_device"] == "opcovtest:0"
    assert default["grad_ok"]
    assert default["relu_autograd_line"].endswith("[kernel]")


def test_a_checkpointed_block_runs_its_backward_on_the_device():
    """Gradient checkpointing (``torch.utils.checkpoint``, reentrant or not) recomputes the block in the backward
    inside an autocast region, which asks the device module for its AMP dtypes: without them the process aborted
    (the real-valued tracer and the planted reality runs use this backend). The gradients are CPU's."""
    got = _results(
        """
        import torch.utils.checkpoint as ckpt
        torch.manual_seed(0)
        lin, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
        want = torch.autograd.grad(lin(x).tanh().sum(), lin.weight)[0]
        dlin = torch.nn.Linear(4, 4).to(dev)
        dlin.load_state_dict(lin.state_dict())
        for reentrant in (False, True):
            dlin.zero_grad()
            xd = x.to(dev).requires_grad_()
            ckpt.checkpoint(lambda t: dlin(t).tanh(), xd, use_reentrant=reentrant).sum().backward()
            res[f"reentrant={reentrant}"] = torch.allclose(dlin.weight.grad.cpu(), want, atol=1e-6)
        """,
        {"kernels": {}, "fallback": "cpu"},
    )
    assert got == {"reentrant=False": True, "reentrant=True": True}
