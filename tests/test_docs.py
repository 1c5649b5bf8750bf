"""The documentation cannot drift from the CLI: docs/cli.md is what scripts/make_cli_docs.py writes from
the parser now, and every 'opcov COMMAND --flag' written in docs/*.md or README.md exists."""

import difflib
import glob
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script():
    spec = importlib.util.spec_from_file_location("make_cli_docs", os.path.join(ROOT, "scripts", "make_cli_docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_cli_docs = _script()


def test_cli_reference_is_what_the_parser_prints():
    with open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8") as f:
        page = f.read()
    fresh = make_cli_docs.render()
    diff = "".join(
        list(difflib.unified_diff(page.splitlines(True), fresh.splitlines(True), "docs/cli.md", "parser"))[:40]
    )
    assert page == fresh, f"docs/cli.md is stale: run 'python scripts/make_cli_docs.py' and commit it\n{diff}"


def test_every_command_and_flag_written_in_the_docs_exists():
    paths = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]
    found = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            found += make_cli_docs.problems(f.read(), os.path.relpath(path, ROOT))
    assert not found, "commands or flags the parser does not have:\n" + "\n".join(found)


def test_the_check_reports_a_wrong_flag_and_an_unknown_command():
    text = (
        "Gate with `opcov check llama -b tpu --fail-on-unknwn`, or\n"
        "`opcov gaps tpu\n--top 5 --verbose`.\n\n"
        "```sh\n"
        "opcov probe cpu --ops '^(mm|mul)$' \\\n"
        "    --dtypes float32 --jbos 2; opcov frobnicate x\n"
        "pip install opcov --upgrade\n"
        "```\n"
        "Prose about opcov check --whatever is not a command line, nor is `kind: opcov index`.\n"
    )
    assert make_cli_docs.problems(text, "x.md") == [
        "x.md:1: 'opcov check --fail-on-unknwn': opcov check has no option --fail-on-unknwn",
        "x.md:2: 'opcov gaps --verbose': opcov gaps has no option --verbose",
        "x.md:6: 'opcov probe --jbos': opcov probe has no option --jbos",
        "x.md:6: 'opcov frobnicate': no such command",
    ]


def test_a_zoo_action_and_alternatives_in_a_table_cell_are_read():
    cell = "| `opcov zoo trace --all\\|--sample N --jobs N [--shard I/N] [--resume]` | ... |\n"
    assert list(make_cli_docs.mentions(cell)) == [(1, ["zoo"], ["--all", "--sample", "--jobs", "--shard", "--resume"])]


def _docs_page():
    spec = importlib.util.spec_from_file_location("docs_page", os.path.join(ROOT, "benchmarks", "docs_page.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_figures_section_is_replaced_whole_never_appended(tmp_path):
    docs_page = _docs_page()
    page = tmp_path / "performance.md"
    page.write_text("# Figures\n\n<!-- begin check -->\nNot measured yet\n<!-- end check -->\n\nAfter.\n")
    for seconds in ("0.9 s", "0.3 s"):
        table = docs_page.markdown_table(["figure", "value"], [["opcov check | -b tpu", seconds]])
        docs_page.write_section(str(page), "check", table, "python benchmarks/bench_check.py")
    text = page.read_text()
    assert text.count("<!-- begin check -->") == 1 and text.count("Measured ") == 1
    assert "0.3 s" in text and "0.9 s" not in text and "Not measured yet" not in text
    assert "| opcov check \\| -b tpu | 0.3 s |" in text  # a '|' in a cell cannot break the table
    assert "by `python benchmarks/bench_check.py`" in text and "CPUs" in text
    assert text.startswith("# Figures\n\n") and text.endswith("<!-- end check -->\n\nAfter.\n")


def test_a_page_without_the_section_is_refused_and_left_alone(tmp_path):
    docs_page = _docs_page()
    page = tmp_path / "accuracy.md"
    page.write_text("# Accuracy\n")
    try:
        docs_page.write_section(str(page), "zoo-recall", "| a |\n| --- |", "python scripts/zoo_recall.py")
    except SystemExit as exc:
        assert "<!-- begin zoo-recall -->" in str(exc)
    else:
        raise AssertionError("a page without the section's markers was written")
    assert page.read_text() == "# Accuracy\n"


def test_figures_another_python_measured_name_its_versions_not_this_ones():
    """The xla compile probe runs in the venv with torch_xla while the benchmark runs here: the stamp
    names the versions of the Python that did the work, and leaves out a package it lacks."""
    docs_page = _docs_page()
    versions = {"torch": "0.0.1-theirs", "torch_xla": None, "Python": "3.0.0"}
    line = docs_page.stamp("python benchmarks/b.py", ("torch", "torch_xla"), versions=versions)
    assert "torch 0.0.1-theirs" in line and "Python 3.0.0" in line and "torch_xla" not in line
    assert "torch 0.0.1-theirs" not in docs_page.stamp("python benchmarks/b.py", ("torch",))


def test_the_documentation_builds_without_a_warning(tmp_path):
    """What the Pages workflow runs: a missing page, a broken cross-reference or bad Markdown fails it."""
    import subprocess
    import sys

    import pytest

    pytest.importorskip("myst_parser", reason="the 'docs' extra (sphinx, myst-parser) is not installed")
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "docs", str(tmp_path / "html")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "html" / "cli.html").is_file()
    assert 'href="../index.html"' in (tmp_path / "html" / "index.html").read_text(encoding="utf-8")


def test_the_samples_in_readme_and_the_docs_are_what_the_commands_print_now():
    """Every sample block (``<!-- begin sample: ARGS | N -->``) in README.md and docs/*.md is the real output of
    ``opcov ARGS`` on the bundled data (scripts/make_doc_samples.py writes them); README and the getting-started
    page hold at least one each."""
    spec = importlib.util.spec_from_file_location("samples", os.path.join(ROOT, "scripts", "make_doc_samples.py"))
    samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(samples)
    for page in ("README.md", os.path.join("docs", "getting-started.md")):
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            assert samples.BLOCK.search(f.read()), f"{page} shows no sample block"
    stale = []
    for page in samples.PAGES:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        if samples.refreshed(text) != text:
            stale.append(os.path.relpath(page, ROOT))
    assert not stale, f"stale samples in {stale}: run python scripts/make_doc_samples.py and commit"


def test_check_md_lists_every_verdict_and_evidence_word():
    """docs/check.md's tables name every verdict word and every level a verdict may rest on."""
    from opcov import vocab

    with open(os.path.join(ROOT, "docs", "check.md"), encoding="utf-8") as f:
        rows = {line.split("|")[1].strip().strip("`") for line in f if line.startswith("| `")}
    missing = sorted(set(vocab.VERDICTS) - rows) + sorted(set(vocab.VERDICT_LEVELS) - rows)
    assert not missing, f"docs/check.md's tables lack {missing}"


def test_check_md_names_the_word_of_a_backend_without_data(capsys):
    """The verdict column's word for a backend opcov knows but has no data for (neuron), as check prints it,
    is in docs/check.md's verdict table: a newcomer who sees it in the table can look it up."""
    from opcov import cli

    assert cli.main(["check", "nn-convnet", "-b", "neuron", "--mode", "inference"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("neuron "))
    word = row.split()[2]
    with open(os.path.join(ROOT, "docs", "check.md"), encoding="utf-8") as f:
        assert any(line.startswith(f"| `{word}` |") for line in f), f"docs/check.md's verdict table lacks {word}"
