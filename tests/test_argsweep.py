"""The argument sweep (``opcov probe --sweep PROBED``): an OpInfo's calls in every class, and with one
path-selecting argument changed, so that a model's call whose class OpInfo's samples never take still has
a probe case of its own class (opcov.probe.argsweep)."""

import os
import shutil

import pytest
import torch
from conftest import ROOT, opcov_here

from opcov import sigclass
from opcov.probe import argsweep, pick
from opcov.store import data

aten = torch.ops.aten


def sweep(opinfo, known=""):
    """The classes a sweep group of ``opinfo`` at float32 runs, as (op, class) texts."""
    group = {"source": argsweep.PREFIX + opinfo, "dtype": "float32", "backward": False, "known": known}
    return [
        (s.fn.func.name(), sigclass.of_call(s.fn.func, s.input, s.kwargs, torch.Tensor))
        for s in argsweep.load(group).samples
    ]


def model_class(func, *args):
    return sigclass.of_call(func, args, {}, torch.Tensor)


def covered(cases, op, call_sig):
    return any(name == op and sigclass.same_path(sig, call_sig) for name, sig in cases)


@pytest.mark.parametrize(
    "opinfo, op, call",
    [
        # a distance with a fractional p and no compute_mode: every cdist sample passes compute_mode
        ("cdist", "aten::_cdist_forward", (aten._cdist_forward.default, torch.rand(2, 3, 4), torch.rand(2, 5, 4), 0.5, None)),
        # a 2x bilinear upsampling (a whole-number scale): the samples resize 4 to 3 (a fraction)
        ("nn.functional.interpolate.bilinear", "aten::upsample_bilinear2d",
         (aten.upsample_bilinear2d.default, torch.rand(1, 2, 4, 4), [8, 8], False)),
        # a summed 2-d loss with weights: another family, another reduction
        ("nn.functional.nll_loss", "aten::nll_loss2d_forward",
         (aten.nll_loss2d_forward.default, torch.rand(2, 3, 4, 4), torch.zeros(2, 4, 4, dtype=torch.long), None, 2, -100)),
        # masked assignment over rows (x[keep] = v, a mask over the first dimension): the samples index by integers
        ("index_put", "aten::index_put", (aten.index_put.default, torch.rand(5, 4), [torch.rand(5) > 0.5], torch.rand(1), False)),
    ],
)  # fmt: skip
def test_a_sweep_reaches_a_class_the_capped_samples_miss(opinfo, op, call):
    sig = model_class(*call)
    cases = sweep(opinfo)
    assert covered(cases, op, sig), f"no {op} case of class {sig} among {cases}"


def test_classes_the_probed_file_holds_are_left_out(monkeypatch):
    cases = sweep("cdist")
    op, sig = next((name, s) for name, s in cases if name == "aten::_cdist_forward" and "p=0.5" in s)
    monkeypatch.setattr(argsweep, "known_classes", lambda path, dtype: {op: {pick.path(sig)}})
    again = sweep("cdist", known="probed.yaml")
    assert again and all(pick.path(s) != pick.path(sig) for name, s in again if name == op)


def test_changes_touch_selectors_only():
    x = torch.rand(1, 2, 4, 4)
    changed = list(argsweep.changes(torch, aten.upsample_bilinear2d.default, (x, [3, 3], True), {}))
    made = {model_class(aten.upsample_bilinear2d.default, *a) for a, _ in changed}
    assert "float32:4;align_corners=False,scale=frac" in made  # align_corners flipped
    assert "float32:4;align_corners=True,scale=int" in made  # an output size twice the input's
    # the input tensor is never changed: a sweep varies arguments, not data
    assert all(a[0] is x for a, _ in changed)


def test_changes_read_every_kind_of_schema_type():
    """Optional numbers ('Scalar? p', printed 'Optional[number]'), int lists and optional ints are varied too:
    a norm's p of 2 becomes 1, 0.5 and none; an average pool gains padding and loses its divisor."""
    x = torch.rand(4, 8)
    made = {
        model_class(aten.norm.ScalarOpt_dim, *a)
        for a, _ in argsweep.changes(torch, aten.norm.ScalarOpt_dim, (x, 2, [1]), {})
    }
    assert {"float32:2;p=1", "float32:2;p=0.5", "float32:2;"} <= made
    y = torch.rand(1, 2, 6, 6)
    pool = aten.avg_pool2d.default
    made = {
        model_class(pool, *a) for a, _ in argsweep.changes(torch, pool, (y, [2, 2], [2, 2], [0, 0], False, True, 3), {})
    }
    assert "float32:4;divisor_override=3,kernel_size=2x2,padding=1x1" in made
    assert "float32:4;kernel_size=2x2" in made  # the divisor left out


def test_enum_codes_take_only_their_codes():
    """An integer that is an enum's code (embedding_bag's mode, grid_sampler's interpolation and padding modes)
    is varied over its codes, never to -1 or 0.5: torch 2.9's CPU embedding_bag crashed the sweep's process on
    mode=-1, so the sweep of nn.functional.embedding_bag ran no case on xla."""
    bag = aten._embedding_bag.default
    call = (torch.rand(5, 3), torch.tensor([0, 1, 2, 3]), torch.tensor([0, 2]), False, 1)
    modes = {argsweep._named(bag, a, k).get("mode") for a, k in argsweep.changes(torch, bag, call, {})}
    assert modes == {0, 1, 2}
    grid = aten.grid_sampler_2d.default
    call = (torch.rand(1, 2, 4, 4), torch.rand(1, 3, 3, 2), 0, 0, False)
    named = [argsweep._named(grid, a, k) for a, k in argsweep.changes(torch, grid, call, {})]
    assert {n["interpolation_mode"] for n in named} == {0, 1, 2}
    assert {n["padding_mode"] for n in named} == {0, 1, 2}


def test_a_sweep_probe_writes_the_new_classes_and_names_its_source(tmp_path):
    # a probed file whose cdist cell holds the classes OpInfo's samples take (each passes compute_mode)
    committed = data.load(os.path.join(ROOT, "coverage", "xla", "probed-torch-2.9.0+cu128-torch_xla-2.9.0.yaml"))
    cell = dict(committed["ops"]["aten::_cdist_forward"]["float32"])
    cell["ran"] = [s for s in cell["ran"] if "compute_mode" in s]
    cell.pop("failed", None)
    known = str(tmp_path / "known.yaml")
    data.save({**committed, "ops": {"aten::_cdist_forward": {"float32": cell}}}, known)
    out = tmp_path / "sweep.yaml"
    proc = opcov_here("probe", "cpu", "--sweep", known, "--ops", "^cdist$", "--dtypes", "float32", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = data.load(str(out))
    ran = doc["ops"]["aten::_cdist_forward"]["float32"]
    assert ran["samples"] == ["sweep.cdist"]
    assert any("p=0.5" in s and "compute_mode" not in s for s in ran["ran"]), ran["ran"]
    # nothing the named file already held is run again
    assert not {pick.path(s) for s in ran["ran"]} & {pick.path(s) for s in cell["ran"]}
    notes = " ".join(doc["provenance"]["notes"])
    assert "argument sweep" in notes and "schema cases" not in notes


def test_a_missing_probed_file_is_one_line(tmp_path):
    proc = opcov_here("probe", "cpu", "--sweep", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "o.yaml"))
    assert proc.returncode == 2 and "--sweep:" in proc.stderr and os.path.basename("none.yaml") in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_sweep_file_that_is_not_a_probed_file_or_is_the_output_is_one_line(tmp_path):
    registered = os.path.join(ROOT, "coverage", "xla", "registered-torch-2.9.0+cu128-torch_xla-2.9.0.yaml")
    proc = opcov_here("probe", "cpu", "--sweep", registered, "--out", str(tmp_path / "o.yaml"))
    assert proc.returncode == 2 and "is not a probed file" in proc.stderr
    known = tmp_path / "known.yaml"  # a probed file, named both as the one to sweep and as the output
    shutil.copy(os.path.join(ROOT, "coverage", "xla", "probed-torch-2.9.0+cu128-torch_xla-2.9.0.yaml"), known)
    proc = opcov_here("probe", "cpu", "--sweep", str(known), "--ops", "^cdist$", "--out", str(known))
    assert proc.returncode == 2 and "never writes over what it reads" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
