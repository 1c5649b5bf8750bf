"""Property-based tests (hypothesis) of the data-safety rules (docs/data-safety.md): every reader gives
lint's answer on damaged files, a call tree never raises anything but a problem, and bad CLI and API
arguments are one-line errors. Seeded with the cases issue reports found; about a minute in all."""

import argparse
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from opcov.errors import DataError, OpcovError, UsageError
from opcov.store import data, lineyaml, opset
from opcov.store.lint import lint_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU = os.path.join(ROOT, "coverage", "tpu", "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _small_coverage() -> str:
    """The tpu file cut to 40 ops (a stamped file as opcov writes it), small enough to read fast."""
    doc = data.load(TPU)
    doc["ops"] = dict(list(sorted(doc["ops"].items()))[:40])
    doc.pop("summary")
    return data.dumps(doc)


SMALL = _small_coverage()
LINES = SMALL.splitlines(keepends=True)


def _verdicts(path: str) -> tuple:
    """('read'|'refused') by data.load, by lineyaml.load of two ops, and by lint; or the exception
    type name when a reader raised anything but DataError."""
    out = []
    for read in (lambda: data.load(path), lambda: lineyaml.load(path, ["aten::abs"], summary=False)):
        try:
            read()
            out.append("read")
        except DataError:
            out.append("refused")
    errors = [p for p in lint_files([path], check_catalog=False) if p.severity == "error"]
    out.append("refused" if errors else "read")
    return tuple(out)


mutations = st.one_of(
    st.tuples(st.just("cut"), st.integers(0, len(SMALL) - 1)),
    st.tuples(st.just("repeat"), st.integers(0, len(LINES) - 1)),
    st.tuples(st.just("drop"), st.integers(1, len(LINES) - 1)),
    st.tuples(
        st.just("insert"),
        st.integers(1, len(LINES) - 1),
        st.sampled_from(
            [
                "ops:\n",
                "backend:\n  name: cpu\n",
                "schema_version: true\n",
                "  <<: {a: 1}\n",
                "  aten::abs: {}\n",
                "  aten::x: {fwd: kernel, res: registered, bwd: none, bwd_res: missing, fwd: kernel}\n",
                "- &a [*a]\n",
            ]
        ),
    ),
    st.tuples(st.just("char"), st.integers(0, len(SMALL) - 1), st.characters(codec="utf-8")),
)


def _mutate(text: str, m) -> str:
    lines = text.splitlines(keepends=True)
    if m[0] == "cut":
        return text[: m[1]]
    if m[0] == "repeat":
        return "".join(lines[: m[1] + 1] + lines[m[1] :])
    if m[0] == "drop":
        return "".join(lines[: m[1]] + lines[m[1] + 1 :])
    if m[0] == "insert":
        return "".join(lines[: m[1]] + [m[2]] + lines[m[1] :])
    return text[: m[1]] + m[2] + text[m[1] + 1 :]


@FAST
@given(mutation=mutations, stamped=st.booleans())
@example(mutation=("repeat", len(LINES) - 1), stamped=True)  # an op twice, counted by the stamp
@example(mutation=("cut", len(SMALL) - 30), stamped=False)  # cut mid-line, no integrity line
@example(mutation=("insert", 8, "schema_version: true\n"), stamped=False)
def test_every_reader_gives_lints_answer(tmp_path_factory, mutation, stamped):
    body = _mutate(SMALL.split("\n", 1)[1], mutation)
    text = body
    if stamped and "\nops:\n" in body:
        text = data.stamped(body, body.split("\nops:\n", 1)[1].count("\n"))
    path = str(tmp_path_factory.mktemp("fuzz") / "f.yaml")
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(text)
    got = _verdicts(path)
    assert got in (("read",) * 3, ("refused",) * 3), (mutation, got)


node_texts = st.lists(
    st.one_of(
        st.builds(
            lambda i, p, k, op, d, c, parent: f"{i} {p} {k} {op} {d} x{c}" + (f" parent={parent}" if parent else ""),
            st.integers(-2, 40),
            st.sampled_from(["forward", "backward", "optimizer", "sideways"]),
            st.sampled_from(["kernel", "composite", "call", "blob"]),
            st.sampled_from(["aten::mm", "aten::linear", "opt.step", "..::index"]),
            st.sampled_from(["float32", "none"]),
            st.one_of(st.integers(0, 5), st.just(10**400)),
            st.one_of(st.none(), st.integers(0, 40)),
        ),
        st.text(max_size=30),
        st.integers(),
        st.none(),
    ),
    max_size=40,
)


@FAST
@given(tree=node_texts)
@example(
    tree=[
        f"{i} forward composite aten::linear float32 x1" + (f" parent={i - 1}" if i > 1 else "") for i in range(1, 1200)
    ]
)
def test_a_call_tree_is_problems_or_nodes_never_an_exception(tree):
    doc = data.load(os.path.join(ROOT, "coverage", "models", "llama", "inference.yaml"), opset.validate)
    doc["calltree"] = tree
    problems = opset.validate(doc, "<fuzz>")
    if not problems:
        nodes = opset.nodes(doc)
        assert len(nodes) == len(tree)
        depth = {}
        for n in nodes:
            depth[n.id] = depth.get(n.parent, 0) + 1
            assert depth[n.id] <= opset.MAX_DEPTH and n.calls <= opset.MAX_CALLS


@FAST
@given(pairs=st.lists(st.text(max_size=40), max_size=4))
@example(pairs=["x=[unclosed"])
@example(pairs=["x=&a [*a]"])
@example(pairs=["num_hidden_layers=-1"])
def test_set_values_are_a_dict_or_one_usage_error(pairs):
    from opcov.cli.trace import overrides

    try:
        out = overrides(pairs)
    except UsageError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(out, dict)


@FAST
@given(text=st.text(max_size=20))
@example(text="-1")
@example(text="0")
@example(text="nan")
@example(text="inf")
def test_numeric_flags_are_a_value_or_one_argument_error(text):
    from opcov.cli import options

    for parse in (options.at_least_one, options.seconds, options.outcome_list):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            assert "\n" not in str(exc)
        else:
            assert parse is options.outcome_list or value > 0


bad_values = st.one_of(
    st.integers(),
    st.binary(max_size=10),
    st.none(),
    st.text(max_size=10).map(lambda t: t + "\0"),
    st.text(alphabet="./\\", min_size=1, max_size=6),
    st.lists(st.integers(), max_size=3),
    st.floats(allow_nan=True),
)


@FAST
@given(model=st.one_of(bad_values, st.just("llama")), backends=bad_values, coverage=st.one_of(st.none(), bad_values))
@example(model="lla\0ma", backends="t\0pu", coverage=None)
@example(model="llama", backends="tpu/../cpu", coverage=None)
@example(model="llama", backends=["tpu"], coverage=123)
def test_the_python_api_raises_one_line_opcov_errors(model, backends, coverage):
    import opcov

    with pytest.raises(OpcovError) as exc:
        opcov.check(model, backends, coverage=coverage)
    assert "\n" not in str(exc.value)
