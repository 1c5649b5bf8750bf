"""No import cycles in opcov: data flows one way (docs: DESIGN), and a function-local import is for a heavy
optional dependency (torch, transformers), never to dodge a cycle. So the graph counts every
``import opcov...`` and ``from opcov... import``, at module level and inside functions alike. The same graph
keeps the layers in order (LAYERS below): none imports a layer above its own, and the producers (scan, probe,
tracing) never import one another."""

import ast
import os

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def modules(src: str = SRC) -> dict[str, str]:
    """Dotted module name -> file, for every module under src/opcov (a package as its __init__)."""
    out = {}
    for folder, _, files in os.walk(os.path.join(src, "opcov")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, src)[:-3].split(os.sep)
                out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: str, module: str, known: dict) -> dict[str, int]:
    """The opcov modules ``module`` imports anywhere in its file, each with the line of its first import.
    ``from P import N`` is module P.N where that is a module, else P itself; relative imports resolve
    against ``module``. Importing a package's submodule does not count as importing the package."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_pkg = path.endswith("__init__.py")
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_pkg else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else base)
        for target in targets:
            if target.split(".")[0] == "opcov" and target != module:
                while target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                out.setdefault(target, node.lineno)
    return out


def graph(src: str = SRC) -> dict[str, dict[str, int]]:
    known = modules(src)
    return {name: imports(path, name, known) for name, path in known.items()}


def cycles(g: dict) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each as one cycle through it."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    found = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(_one_cycle(g, sorted(comp)))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def _one_cycle(g: dict, comp: list) -> list[str]:
    """A shortest cycle through the component's first module, as a path that ends where it starts."""
    start, members = comp[0], set(comp)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(g[v]):
            if w == start:
                return paths[v] + [start]
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return comp


def test_no_import_cycles():
    g = graph()
    found = cycles(g)
    lines = [" -> ".join(f"{m} (line {g[m][n]})" if n else m for m, n in zip(c, c[1:] + [None])) for c in found]
    assert not found, "import cycles in src/opcov:\n" + "\n".join(lines)


def test_the_checker_sees_function_local_and_relative_imports(tmp_path):
    """The test above can fail: a cycle made only by an import inside a function (or a relative one) is found."""
    pkg = tmp_path / "opcov"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from opcov.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("import opcov.sub.a\n")
    g = graph(str(tmp_path))
    assert g["opcov.sub.b"] == {"opcov.sub.a": 2} and g["opcov.c"] == {"opcov.sub.a": 1}
    assert cycles(g) == [["opcov.sub.a", "opcov.sub.b", "opcov.sub.a"]]


# The layers, bottom first. A module imports from its own layer and those below it, never from one above,
# at module level or inside a function. The producers (scan, probe, tracing) stand side by side on the data
# layer and never import one another: what two of them share (OpInfo samples, model builders and the zoo,
# the stand-in device, signature classes) lives below them (docs: DESIGN). The verdict stands beside them: it
# reads the data they write, never a producer. A module is in the layer of the longest name here that it is or
# lies under; every module must be in one, so a new one is placed on purpose.
PRODUCERS = ("opcov.scan", "opcov.probe", "opcov.tracing")
SIDE_BY_SIDE = (*PRODUCERS, "opcov.verdict")  # one layer, none of which imports another
LAYERS = (
    (
        "base",
        (
            "opcov.errors",
            "opcov.vocab",
            "opcov.version",
            "opcov.provenance",
            "opcov.dtypes",
            "opcov.torchenv",
            "opcov.activity",
            "opcov.children",
            "opcov.forked",
            "opcov.formats",
            "opcov.trees",
        ),
    ),
    (
        "data",
        (
            "opcov.store",
            "opcov.catalog",
            "opcov.backends",
            "opcov.suggest",
            "opcov.sigclass",
            "opcov.branches",
            "opcov.sources",
            "opcov.modelnames",
        ),
    ),
    ("producers and verdict", SIDE_BY_SIDE),
    ("users", ("opcov.api", "opcov.support", "opcov.site", "opcov.testing")),
    ("entry", ("opcov", "opcov.__main__", "opcov.cli")),
)
# Imports that still cross a layer the wrong way, each with why; the test fails once one is gone (so the
# list only shrinks) and for any crossing not listed.
KNOWN_CROSSINGS: dict[tuple[str, str], str] = {}


def place(module: str, layers=LAYERS) -> tuple[int, str] | None:
    """(layer index, the name it is placed by) of ``module``: the longest listed name it is or lies under
    ('opcov' itself only by its own name, not as everything's parent); None where none is listed."""
    best = None
    for i, (_, names) in enumerate(layers):
        for name in names:
            if module == name or (name != "opcov" and module.startswith(name + ".")):
                if best is None or len(name) > len(best[1]):
                    best = (i, name)
    return best


def crossings(g: dict, layers=LAYERS, apart=SIDE_BY_SIDE) -> tuple[list[str], list[tuple[str, str]]]:
    """(modules no layer holds, imports that go up a layer or from one of ``apart`` to another) in ``g``."""
    unplaced = sorted(m for m in g if place(m, layers) is None)
    wrong = []
    for m, deps in sorted(g.items()):
        pm = place(m, layers)
        for d in sorted(deps):
            pd = place(d, layers)
            if pm is None or pd is None:
                continue
            if pd[0] > pm[0] or (pm[1] in apart and pd[1] in apart and pm[1] != pd[1]):
                wrong.append((m, d))
    return unplaced, wrong


def test_every_module_has_a_layer():
    unplaced, _ = crossings(graph())
    assert not unplaced, "modules in no layer of LAYERS (tests/test_import_graph.py): " + ", ".join(unplaced)


def test_layers_point_one_way_and_producers_stand_side_by_side():
    g = graph()
    _, wrong = crossings(g)
    new = [f"{m} (line {g[m][d]}) imports {d}" for m, d in wrong if (m, d) not in KNOWN_CROSSINGS]
    gone = [f"{m} -> {d}" for m, d in KNOWN_CROSSINGS if (m, d) not in wrong]
    assert not new, "imports up a layer, or between producers and the verdict:\n" + "\n".join(new)
    assert not gone, "no longer crossing (take them out of KNOWN_CROSSINGS):\n" + "\n".join(gone)


def test_the_layer_rule_can_fail(tmp_path):
    """The rule above can fail: an import up a layer, one producer importing another (inside a function too)
    and a module in no layer are each found."""
    pkg = tmp_path / "opcov"
    for sub in ("store", "scan", "probe", "verdict"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "data.py").write_text("def f():\n    from opcov.verdict import judge\n")
    (pkg / "verdict" / "judge.py").write_text("from opcov.store import data\nfrom opcov.scan import reach\n")
    (pkg / "scan" / "reach.py").write_text("def f():\n    from opcov.probe import cases\n")
    (pkg / "probe" / "cases.py").write_text("from opcov.store import data\n")
    (pkg / "stray.py").write_text("")
    layers = (("data", ("opcov.store",)), ("producers", ("opcov.scan", "opcov.probe")), ("verdict", ("opcov.verdict",)))
    unplaced, wrong = crossings(graph(str(tmp_path)), layers, ("opcov.scan", "opcov.probe"))
    assert unplaced == ["opcov", "opcov.stray"]
    assert wrong == [("opcov.scan.reach", "opcov.probe.cases"), ("opcov.store.data", "opcov.verdict.judge")]
    assert place("opcov.verdict.reports.text", LAYERS) == (2, "opcov.verdict")
    assert place("opcov", LAYERS) == (4, "opcov") and place("opcov.opcovish", LAYERS) is None
