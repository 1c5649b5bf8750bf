"""opcov compare A B: on a small folder whose answer is known, on the bundled data, and cuda's pairing.

The bundled cuda data (coverage/cuda/) was scanned from the registry's CUDA build of torch 2.13.0
(scripts/envs/cuda.sh); these tests only read it, they never need that environment.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import ROOT, opcov_here
from test_check import TORCH, fwd, kernel, model, probed, registered

from opcov.store import data, layout, opset
from opcov.verdict import compare

BUNDLED = os.path.join(ROOT, "coverage")
MISSING = {"fwd": "missing", "res": "missing", "bwd": "none", "bwd_res": "not_applicable"}
FALLBACK = {"fwd": "fallback", "res": "fallback", "bwd": "formula", "bwd_res": "fallback"}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """compare keeps each op set's judgment in the user's cache folder: here, a folder of the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.fixture
def two(tmp_path):
    """Backends 'one' (fallback disabled) and 'two' (CPU fallback enabled), and four op sets.

    one lacks aten::gone (missing; two has a kernel) in m1 training and m2; aten::mm is probed on
    both and wrong on one. two runs aten::add only through its CPU fallback (one has a kernel), in
    m1 training. aten::never is missing on both and aten::t registered on both: neither is listed.
    """
    root = tmp_path / "coverage"
    one = {
        "aten::mm": kernel(),
        "aten::add.Tensor": kernel(),
        "aten::gone": dict(MISSING),
        "aten::never": dict(MISSING),
        "aten::t": kernel(),
    }
    two = {
        "aten::mm": kernel(),
        "aten::add.Tensor": dict(FALLBACK),
        "aten::gone": kernel(),
        "aten::never": dict(MISSING),
        "aten::t": kernel(),
    }
    data.save(registered("one", one), str(root / "one" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    data.save(
        registered("two", two, fallback_enabled=True), str(root / "two" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml")
    )
    data.save(
        probed("one", {"aten::mm": {"float32": {"fwd": "error", "why": "RuntimeError: boom"}}}),
        str(root / "one" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    data.save(
        probed("two", {"aten::mm": {"float32": {"fwd": "pass"}}}),
        str(root / "two" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    sets = {
        ("m1", "training"): {"aten::mm": fwd(), "aten::gone": fwd(calls=2), "aten::add.Tensor": fwd(calls=3)},
        ("m1", "inference"): {"aten::mm": fwd(), "aten::t": fwd()},
        ("m2", "inference"): {"aten::gone": fwd(calls=5), "aten::never": fwd()},
        ("m3", "inference"): {"aten::t": fwd(), "aten::never": fwd()},
    }
    for (name, mode), ops in sets.items():
        opset.save(model(ops, mode=mode, name=name), str(root / "models" / name / f"{mode}.yaml"))
    return str(root)


def entries(result, backend):
    return [(d.op, d.evidence, d.outcome, d.other_outcome, sorted(d.models)) for d in result.lacks[backend]]


def test_known_answer(two):
    result = compare.compare("one", "two", two)
    assert result.opsets == 4 and result.modes == {
        "m1": {"training", "inference"},
        "m2": {"inference"},
        "m3": {"inference"},
    }
    # ranked by models affected: gone (m1, m2) before mm (m1 in both modes, one model)
    assert entries(result, "one") == [
        ("aten::gone", "registered", "fails", "ok", [("m1", "training"), ("m2", "inference")]),
        ("aten::mm", "probed", "fails", "ok", [("m1", "inference"), ("m1", "training")]),
    ]
    assert entries(result, "two") == [("aten::add.Tensor", "registered", "fallback", "ok", [("m1", "training")])]
    gone = result.lacks["one"][0]
    assert gone.calls == 7 and compare.model_names(gone, result.modes) == ["m1 (training)", "m2"]
    assert compare.model_names(result.lacks["one"][1], result.modes) == ["m1"]  # every mode of m1
    # the same comparison from the other side swaps the lists
    swapped = compare.compare("two", "one", two)
    assert entries(swapped, "one") == entries(result, "one") and entries(swapped, "two") == entries(result, "two")


def test_models_and_modes_narrow_it(two):
    only_m2 = compare.compare("one", "two", two, models=compare.parse_models("m2"))
    assert [d.op for d in only_m2.lacks["one"]] == ["aten::gone"] and only_m2.lacks["two"] == []
    inference = compare.compare("one", "two", two, modes=["inference"])
    assert [d.op for d in inference.lacks["one"]] == ["aten::gone", "aten::mm"] and inference.lacks["two"] == []
    assert compare.parse_models("zoo") is None and compare.parse_models(" a, b ") == ["a", "b"]


def test_cli_text_and_json(two):
    r = opcov_here("compare", "one", "two", "--coverage", two)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("opcov compare one two: 4 model op set(s) of 3 model(s)")
    assert "one lacks what two has: 2 op(s), ranked by models affected" in lines
    assert "two lacks what one has: 1 op(s), ranked by models affected" in lines
    gone = next(line for line in lines if "aten::gone" in line)
    assert gone.split() == ["2", "models", "aten::gone", "one:", "fails,", "two:", "runs", "[m1", "(training),", "m2]"]
    # the probed difference sits under its own heading, before the claims
    text = r.stdout
    assert text.index("measured (probed on both backends)") < text.index("aten::mm") < text.index("two lacks")
    assert "a claim (registered, unverified on at least one side)" in text
    j = opcov_here("compare", "one", "two", "--coverage", two, "--format", "json")
    out = json.loads(j.stdout)
    assert out["a"] == "one" and out["b"] == "two" and out["opsets"] == 4 and out["models"] == 3
    assert [e["op"] for e in out["lacks"]["one"]] == ["aten::gone", "aten::mm"]
    add = out["lacks"]["two"][0]
    assert add["outcome"] == "fallback" and add["models"] == ["m1 (training)"] and add["calls"] == 3
    assert any("CPU fallback" in w for w in add["why"])


def test_usage_errors_are_one_line(two):
    for args, words in (
        (("one", "one"), "two different backends"),
        (("one", "nosuch"), "nosuch"),
        (("one", "two", "--models", "m9"), "no op sets for m9"),
    ):
        r = opcov_here("compare", *args, "--coverage", two)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


def test_bundled_tpu_against_cpu_agrees_with_check():
    """Every difference compare lists is what check says of that op on both backends for those models."""
    models = ["wav2vec2", "nn-lstm", "nn-gru", "llama"]
    result = compare.compare("tpu", "cpu", BUNDLED, models=models)
    every = sum(len(layout.opset_files(layout.model_folder(m, BUNDLED))) for m in models)  # llama: serve too
    assert result.opsets == every >= 8 and result.sources["tpu"] == [
        layout.pick(layout.snapshots(BUNDLED, "tpu")["registered"], TORCH)
    ]
    listed = {(d.lacking, d.op) for ds in result.lacks.values() for d in ds}
    assert ("tpu", "aten::_weight_norm_interface_backward") in listed  # tpu's gap in wav2vec2 training
    r = opcov_here(
        "check", "wav2vec2", "-b", "tpu", "-b", "cpu", "--mode", "training", "--format", "json", "--coverage", BUNDLED
    )
    by = {v["backend"]: {o["op"]: o["outcome"] for o in v["ops"]} for v in json.loads(r.stdout)["verdicts"]}
    op = "aten::_weight_norm_interface_backward"
    assert by["tpu"][op] == "fails" and by["cpu"][op] == "ok"
    for ds in result.lacks.values():
        for d in ds:
            assert d.outcome in ("fails", "unknown", "fallback") and d.other_outcome in ("ok", "fallback")
            assert d.model_count >= 1 and set(compare.model_names(d, result.modes)) <= set(models) | {
                f"{m} ({mode})" for m in models for mode in ("inference", "training")
            }


def test_cuda_data_pairs_with_cpu_traced_op_sets():
    """coverage/cuda was scanned with 2.13.0+cu130, the op sets traced with 2.13.0+cpu: one release,
    one op catalogue, so check picks it and says nothing of differing versions."""
    files = layout.snapshots(BUNDLED, "cuda")["registered"]
    assert files and all(layout.same_torch(os.path.basename(f).split("-")[2], "2.13.0+cpu") for f in files)
    assert layout.pick(files + ["coverage/cuda/registered-torch-2.12.0+cu126.yaml"], "2.13.0+cpu") == files[-1]
    assert layout.same_torch("2.13.0", "2.13.0+cpu") and not layout.same_torch("2.13.1+cpu", "2.13.0+cpu")
    r = opcov_here("check", "llama", "-b", "cuda", "--format", "json", "--coverage", BUNDLED)
    assert r.returncode == 0, r.stderr
    for v in json.loads(r.stdout)["verdicts"]:
        assert v["sources"] == files[-1:] and not any("versions" in n or "torch 2.13.0+cu" in n for n in v["notes"])
        assert v["verdict"] == "runs" and v["counts"]["unknown"] == 0


def test_compare_tpu_cuda_on_bundled_data():
    r = opcov_here("compare", "tpu", "cuda", "--models", "wav2vec2,nn-lstm", "--coverage", BUNDLED)
    assert r.returncode == 0, r.stderr
    assert "tpu lacks what cuda has" in r.stdout and "aten::_weight_norm_interface_backward" in r.stdout


def test_cuda_convolutions_route_to_cudnn_and_native_kernels():
    """On CUDA, ATen's _convolution picks cuDNN or a native CUDA kernel, never the overrideable stub
    meta tensors show: every convnet in the zoo is judged on those kernels, not left unknown."""
    r = opcov_here("check", "nn-convnet", "-b", "cuda", "--format", "json", "--coverage", BUNDLED)
    assert r.returncode == 0, r.stderr
    for v in json.loads(r.stdout)["verdicts"]:
        assert v["counts"]["unknown"] == 0, v
    from opcov.store import data

    conv = data.load(layout.snapshots(BUNDLED, "cuda")["registered"][-1])["ops"]["aten::_convolution"]
    assert "aten::cudnn_convolution" in conv["via"] and "aten::convolution_overrideable" not in conv["via"]
    assert conv["res"] == "registered"


def test_each_coverage_file_is_read_once(two, monkeypatch):
    """compare judges every op set on both backends; each coverage file is parsed once per process, not
    once per op set and backend (that made 'opcov compare tpu cuda' take 40 s over the zoo)."""
    from opcov.store import lineyaml

    reads = []
    real = lineyaml.load

    def counting(path, *args, **kwargs):
        reads.append(os.path.relpath(path, two))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(lineyaml, "load", counting)
    serial = compare.compare("one", "two", two, fork=False, cache=False)
    assert sorted(reads) == sorted(set(reads)) and len(reads) == 4, reads  # registered + probed, two backends
    split = compare.compare("one", "two", two, fork=True, cache=False)  # a forked child judges some: same answer
    for backend in ("one", "two"):
        assert entries(split, backend) == entries(serial, backend)
    assert split.opsets == serial.opsets == 4


def test_a_second_run_reuses_the_judgments_until_a_file_changes(two, monkeypatch):
    """Judging the zoo's ~1,500 op sets was the whole cost of 'opcov compare tpu cuda' (7 s, 30 s on a busy
    machine): each op set's judgment is kept, and a run that changes nothing judges nothing and answers
    the same. A changed coverage file or op set is judged again."""
    from opcov.verdict import judge

    first = compare.as_dict(compare.compare("one", "two", two, fork=False))
    real = judge.judge

    def refuse(*args, **kwargs):
        raise AssertionError("judged again")

    monkeypatch.setattr(judge, "judge", refuse)
    assert compare.as_dict(compare.compare("one", "two", two, fork=False)) == first
    assert (
        compare.render(compare.compare("one", "two", two), "json") == json.dumps(first, indent=2, sort_keys=True) + "\n"
    )
    assert [e["op"] for e in first["lacks"]["one"]][:1] == ["aten::gone"]

    # two loses its kernel for aten::gone: one no longer lacks it
    path = os.path.join(two, "two", f"registered-torch-{TORCH}-fakepkg-1.0.yaml")
    doc = data.load(path)
    doc["ops"]["aten::gone"] = dict(MISSING)
    data.save(doc, path)
    with pytest.raises(AssertionError, match="judged again"):
        compare.compare("one", "two", two, fork=False)
    monkeypatch.setattr(judge, "judge", real)
    after = compare.as_dict(compare.compare("one", "two", two, fork=False))
    assert "aten::gone" not in [e["op"] for e in after["lacks"]["one"]]

    # one op set changed: that one alone is judged again
    judged = []

    def counting(doc, cov):
        judged.append(doc["model"]["name"])
        return real(doc, cov)

    monkeypatch.setattr(judge, "judge", counting)
    m3 = os.path.join(two, "models", "m3", "inference.yaml")
    doc = opset.load(m3)
    doc["ops"]["aten::gone"] = doc["ops"]["aten::t"]
    opset.save(doc, m3)
    again = compare.as_dict(compare.compare("one", "two", two, fork=False))
    assert judged == ["m3", "m3"]  # on both backends
    assert compare.as_dict(compare.compare("one", "two", two, fork=False, cache=False)) == again
