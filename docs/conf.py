"""Sphinx configuration: the user guide under docs/, Markdown read by MyST, built with
``sphinx-build -W -b html docs site/docs`` into the published site beside the coverage pages."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from opcov import __version__  # noqa: E402

project = "opcov"
author = "opcov contributors"
copyright = "opcov contributors"
version = release = __version__

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
# 'Heading' anchors, so pages can link to each other's sections: [x](check.md#the-ci-gate)
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"opcov {release} documentation"
html_theme_options = {
    "description": "Which ATen operators does a PyTorch backend support, and can my model run on it?",
    # the coverage site is published one folder up: site/index.html beside site/docs/
    "extra_nav_links": {"Coverage site (ops, backends, models)": "../index.html"},
    "show_relbars": True,
    "page_width": "1100px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
html_show_sourcelink = False
