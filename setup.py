"""Build hook: the wheel carries the bundled coverage data (coverage/ at the repository root).

``pip install opcov`` must answer ``opcov check llama -b tpu`` from any folder, so the committed
coverage files and zoo op sets travel inside the package as ``opcov/bundled/coverage/``
(found by ``opcov.store.layout``). The repository keeps one copy, at the top level.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithData(build_py):
    """build_py, then copy coverage/*.yaml into build/lib/opcov/bundled/coverage/."""

    def run(self):
        super().run()
        src = os.path.join(HERE, "coverage")
        if not os.path.isdir(src):  # an sdist without data: nothing to bundle
            return
        dst = os.path.join(self.build_lib, "opcov", "bundled", "coverage")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.tmp*", "*.journal.jsonl", "__pycache__"))


setup(cmdclass={"build_py": BuildWithData})
