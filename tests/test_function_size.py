"""No function over 80 lines in the packages a reader should take in one function at a time (issue 46): the
command line (``cli/``: one small parser and one run per command, the shared option groups once), the verdict
(``verdict/``: the judge one classification function per evidence source) and the data layer (``store/``)."""

import ast
import os

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "opcov")
LIMIT = 80  # lines, from the def line to the function's last line


def long_functions(folder: str, limit: int = LIMIT) -> list[str]:
    """'path:line name: N lines' for every function (methods and nested functions too) under ``folder``
    longer than ``limit`` lines."""
    found = []
    for root, _dirs, names in sorted(os.walk(folder)):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    if size > limit:
                        found.append(f"{os.path.relpath(path, SRC)}:{node.lineno} {node.name}: {size} lines")
    return found


@pytest.mark.parametrize("folder", ["cli", "verdict", "store"])
def test_no_function_over_80_lines(folder):
    found = long_functions(os.path.join(SRC, folder))
    assert not found, f"functions over {LIMIT} lines in src/opcov/{folder}:\n" + "\n".join(found)


def test_the_check_sees_a_long_function(tmp_path):
    """The test above can fail: a method of 81 lines is found, one of 80 is not."""
    body = "\n".join(f"        x{i} = {i}" for i in range(79))
    (tmp_path / "long.py").write_text(f"class C:\n    def long(self):\n{body}\n        return 0\n")
    (tmp_path / "short.py").write_text(f"def short():\n{body.replace('        ', '    ')}\n")
    found = long_functions(str(tmp_path))
    assert len(found) == 1 and found[0].endswith("long: 81 lines"), found
