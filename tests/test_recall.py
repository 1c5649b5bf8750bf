"""Trace-vs-eager recall (issue 17, part 3): per phase, over op overloads, of the op set as saved and
of its fake part alone; and the CPU half of scripts/zoo_recall.py, whose two sides (a --device cpu fake
trace, an eager CPU run) are made in the zoo's workers at the same sizes, with CPU's own kernels.
"""

import os
import subprocess
import sys

from conftest import ROOT, child_env, load_yaml

from opcov.tracing import recall


def doc(ops, command="opcov trace hf:x --mode training --set hidden_size=64", params=10):
    """An op-set document as opset.load returns it: ops {op: {phase: {dtype: cell}}}."""
    return {"ops": ops, "provenance": {"command": command, "tracing": "fake"}, "model": {"params": params}}


def cell(seen=None):
    return {"float32": {"calls": 1, **({"seen": seen} if seen else {})}}


def test_compare_is_per_phase_with_the_misses_and_the_extras():
    traced = doc(
        {
            "aten::mm": {"forward": cell(), "backward": cell()},
            "aten::all": {"forward": cell(seen="real")},  # only the branch run saw it
            "aten::copy_": {"backward": cell()},
        }
    )
    eager = doc(
        {
            "aten::mm": {"forward": cell(), "backward": cell()},
            "aten::all": {"forward": cell()},
            "aten::tanh": {"forward": cell()},
            "aten::tanh_backward": {"backward": cell()},
        }
    )
    rows = {r.phase: r for r in recall.compare(traced, eager)}
    assert sorted(rows) == ["backward", "forward"]  # no optimizer on either side: no row
    fwd, bwd = rows["forward"], rows["backward"]
    assert (fwd.recall, fwd.missed, fwd.extra) == (2 / 3, ["aten::tanh"], [])
    assert (fwd.fake_recall, fwd.fake_missed) == (1 / 3, ["aten::all", "aten::tanh"])
    assert (bwd.recall, bwd.missed, bwd.extra) == (0.5, ["aten::tanh_backward"], ["aten::copy_"])
    cells = recall.row_text("x", "training", fwd).split("\t")
    assert dict(zip(recall.COLUMNS, cells)) == {
        "model": "x",
        "mode": "training",
        "phase": "forward",
        "eager_ops": "3",
        "traced_ops": "2",
        "recall": "0.667",
        "fake_recall": "0.333",
        "missed": "aten::tanh",
        "fake_missed": "aten::all,aten::tanh",
        "extra": "",
    }


def test_summary_counts_architecture_modes_at_the_target_per_phase():
    full = {"aten::a": {"forward": cell(), "optimizer": cell()}}
    half = {"aten::a": {"forward": cell(), "optimizer": cell()}, "aten::b": {"forward": cell()}}
    rows = [("m1", "training", r) for r in recall.compare(doc(full), doc(full))]
    rows += [("m2", "training", r) for r in recall.compare(doc(full), doc(half))]
    assert recall.summary(rows) == {"forward": (1, 2, 0.75), "optimizer": (2, 2, 1.0)}


def test_unlike_names_what_makes_two_op_sets_other_models():
    a = doc({}, command="opcov trace hf:x --mode training --device cpu --set hidden_size=64 --out /w/fake/x.yaml")
    same = doc({}, command="opcov trace hf:x --mode training --device cpu --real --set hidden_size=64 --out /e/x.yaml")
    wider = doc({}, command="opcov trace hf:x --mode training --device cpu --real --set hidden_size=4096")
    assert recall.unlike(a, same) == ""
    assert "hidden_size=4096" in recall.unlike(a, wider)
    assert "parameters" in recall.unlike(a, doc({}, command=same["provenance"]["command"], params=11))


def test_cpu_half_compares_cpu_traces_with_cpu_runs_per_phase(tmp_path):
    """scripts/zoo_recall.py --device cpu on bert (sdpa) and the LSTM block: both sides are CPU's (the
    sdpa kernel is CPU's own flash kernel on both, which no accelerator trace or stand-in run has), at
    one set of sizes, and the table holds one row per phase with the recall of those two op sets."""
    work, out = tmp_path / "work", tmp_path / "recall-cpu.tsv"
    r = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "zoo_recall.py"),
            "--device",
            "cpu",
            "--only",
            "bert,nn-lstm",
            "--jobs",
            "1",
            "--workdir",
            str(work),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=600,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "4 architecture-modes compared, 0 apart" in r.stdout
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# command: python scripts/zoo_recall.py --only bert,nn-lstm --device cpu")
    assert any(ln.startswith("# device: cpu") for ln in lines)
    rows = [dict(zip(recall.COLUMNS, ln.split("\t"))) for ln in lines if not ln.startswith("#")][1:]
    assert {(r["model"], r["mode"], r["phase"]) for r in rows} == {
        ("bert", "inference", "forward"),
        ("nn-lstm", "inference", "forward"),
        *((m, "training", p) for m in ("bert", "nn-lstm") for p in ("forward", "backward", "optimizer")),
    }
    for side, tracing in (("fake", "fake"), ("eager", "real")):
        bert = load_yaml(work / side / "bert" / "inference.yaml")
        assert bert["provenance"]["tracing"] == tracing
        assert (bert["provenance"]["target_device"], bert["provenance"]["traced_on"]) == ("cpu", "cpu")
        assert "forward" in bert["ops"]["aten::_scaled_dot_product_flash_attention_for_cpu"]
    from opcov.store import opset

    for row in rows:  # each row is the recall of that phase of the two op sets in the work folder
        fake, eager = (
            opset.load(str(work / side / row["model"] / f"{row['mode']}.yaml")) for side in ("fake", "eager")
        )
        assert recall.unlike(fake, eager) == ""
        (phase,) = [p for p in recall.compare(fake, eager) if p.phase == row["phase"]]
        assert recall.row_text(row["model"], row["mode"], phase) == "\t".join(row[c] for c in recall.COLUMNS)
        assert float(row["recall"]) >= float(row["fake_recall"])  # the branch run (eager on CPU) only adds
    bert_fwd = [r for r in rows if (r["model"], r["mode"], r["phase"]) == ("bert", "inference", "forward")]
    assert float(bert_fwd[0]["recall"]) == 1.0, bert_fwd  # its host-side mask check is in the op set now
