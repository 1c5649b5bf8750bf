"""scripts/compile_reality.py: how a compile verdict is scored against a real Inductor compile."""

import argparse
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script():
    spec = importlib.util.spec_from_file_location(
        "compile_reality", os.path.join(ROOT, "scripts", "compile_reality.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_runs_agrees_with_a_compile_that_ran_and_fails_with_a_compile_error():
    s = _script()
    assert s.agrees("runs", "compiled") and s.agrees("runs", "graph_breaks")
    assert s.agrees("runs", "wrong_values") is False and s.agrees("runs", "compile_error") is False
    assert s.agrees("fails", "compile_error") and s.agrees("fails", "compiled") is False
    assert s.agrees("unknown", "compiled") is None and s.agrees("runs", "harness") is None


def test_the_page_is_replaced_with_the_confusion_table(tmp_path):
    s = _script()
    doc = tmp_path / "accuracy-compile.md"
    doc.write_text("old figures\n")
    rows = [
        dict(
            model="a",
            mode="training",
            predicted="runs",
            says="runs (registered, unverified)",
            actual="compiled",
            detail="ok",
            agrees=True,
            breaks_agree=True,
        ),
        dict(
            model="b",
            mode="training",
            predicted="fails",
            says="fails (registered evidence)",
            actual="graph_breaks",
            detail="x|y",
            agrees=False,
            breaks_agree=False,
        ),
    ]
    args = argparse.Namespace(models="a,b", modes="training", doc=str(doc))
    s.write_doc(args, rows, 12.0, "2.13.0+cpu")
    text = doc.read_text()
    assert "old figures" not in text
    assert "Verdicts that agree: 1 of 2 judged (50%)" in text
    assert "| runs | 1 | 0 | 0 | 0 | 0 |" in text and "| fails | 0 | 1 | 0 | 0 | 0 |" in text
    assert "x\\|y" in text  # a detail cannot break the table
