"""One version number: the package metadata's is the one opcov writes into its data files."""

import os
import re

from opcov.version import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pyproject_and_package_name_one_version_with_a_changelog_entry():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        declared = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    assert declared == __version__
    with open(os.path.join(ROOT, "CHANGELOG.md")) as f:
        assert re.search(rf"^## {re.escape(__version__)}\b", f.read(), re.M), "CHANGELOG.md has no entry for it"
