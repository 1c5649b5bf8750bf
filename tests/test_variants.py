"""Input variants: each call-tree node names the inputs that made it, and ``opcov check`` judges the inputs
the user gave apart from the variants opcov added (a padded attention mask)."""

import json
from xml.etree import ElementTree as ET

import pytest
from conftest import opcov_here
from test_check import TORCH, kernel, registered, tree_opset

from opcov.store import data, opset
from opcov.tracing import calltree


def tree_model(nodes, mode="inference"):
    """A schema 2 op set from node rows (opset.Node's fields)."""
    return tree_opset([opset.node_text(row) for row in nodes], mode, name="masked")


def node(nid, op, dtype="float32", calls=1, kind="kernel", variants=("given",), **extra):
    return {"id": nid, "phase": "forward", "kind": kind, "op": op, "dtype": dtype, "calls": calls,
            "variants": variants, **extra}  # fmt: skip


# mm is the model's; the padded mask adds bitwise_and, which the backend lacks
MASKED = [
    node(1, "aten::mm", calls=3, variants=("given", "padded_mask")),
    node(2, "aten::bitwise_and.Tensor", dtype="bool", variants=("padded_mask",)),
]


@pytest.fixture
def cov(tmp_path):
    ops = {
        "aten::mm": kernel(),
        "aten::bitwise_and.Tensor": {"fwd": "missing", "res": "missing", "bwd": "none", "bwd_res": "not_applicable"},
    }
    root = tmp_path / "coverage"
    data.save(registered(ops=ops), str(root / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    return root


def save(tmp_path, nodes, name="masked.yaml"):
    path = tmp_path / name
    opset.save(tree_model(nodes), str(path))
    return str(path)


def check(path, cov, *extra):
    return opcov_here("check", path, "--backend", "fake", "--coverage", str(cov), *extra)


# ---------------------------------------------------------------- the node grammar


def test_a_node_names_its_variants_and_reads_back():
    text = opset.node_text({**MASKED[0], "variants": ("padded_mask", "given")})
    assert text == "1 forward kernel aten::mm float32 x3 variant=given,padded_mask"
    assert opset.parse_node(text).variants == ("given", "padded_mask")
    assert opset.parse_node("1 forward kernel aten::mm float32 x3").variants == ()  # older files: not recorded
    # any word order reads (the general reader), and names the word it does not know
    assert opset.parse_node("1 forward kernel aten::mm float32 x3 variant=given grad").variants == ("given",)


@pytest.mark.parametrize(
    "variants, said",
    [
        (("given", "shuffled"), "variant=given,shuffled must be a sorted comma list of given, padded_mask"),
        (("padded_mask", "given"), "variant=padded_mask,given must be a sorted comma list"),
    ],
)
def test_lint_refuses_a_variant_outside_the_vocabulary_or_unsorted(tmp_path, variants, said):
    doc = tree_model(MASKED)
    doc["calltree"][1] = doc["calltree"][1].replace("variant=padded_mask", "variant=" + ",".join(variants))
    path = tmp_path / "bad.yaml"
    path.write_text(data.dumps(doc))
    r = opcov_here("lint", str(path), "--no-catalog")
    assert r.returncode == 1 and said in r.stdout, r.stdout + r.stderr
    assert "calltree node 2" in r.stdout


def test_lint_refuses_variants_on_some_nodes_only(tmp_path):
    problems = opset.validate(tree_model([MASKED[0], {**MASKED[1], "variants": ()}]), "x.yaml")
    assert any("1 of 2 nodes say which input variant made them" in p.message for p in problems)


def test_for_variant_keeps_the_nodes_that_variant_made():
    doc = tree_model(MASKED)
    assert opset.variants(doc) == ("given", "padded_mask")
    given = opset.for_variant(doc, "given")
    assert set(given["ops"]) == {"aten::mm"} and len(given["calltree"]) == 1
    assert given["summary"]["calls"]["forward"] == 3
    padded = opset.for_variant(doc, "padded_mask")
    assert set(padded["ops"]) == {"aten::mm", "aten::bitwise_and.Tensor"}
    assert not opset.validate(padded, "x.yaml")  # a whole tree: what it names is there
    assert opset.variants(tree_model([{**n, "variants": ()} for n in MASKED])) == ()


def test_merging_runs_unions_the_variants_that_saw_a_node():
    fake = [{"id": 1, "phase": "forward", "kind": "kernel", "op": "aten::mm", "dtype": "float32", "calls": 2,
             "variants": ("given",)}]  # fmt: skip
    padded = [
        {**fake[0], "variants": ("padded_mask",)},
        {**fake[0], "id": 2, "op": "aten::bitwise_and.Tensor", "dtype": "bool", "variants": ("padded_mask",)},
    ]
    merged = calltree.merge(fake, [padded])
    assert [r["variants"] for r in merged] == [("given", "padded_mask"), ("padded_mask",)]


# ---------------------------------------------------------------- opcov check


def test_check_judges_the_given_inputs_and_the_padded_mask_apart(tmp_path, cov):
    path = save(tmp_path, MASKED)
    r = check(path, cov)
    assert r.returncode == 0, r.stdout + r.stderr  # the given inputs run: the gate passes
    assert "fake (inference): RUNS (registered, unverified): 1 ops" in r.stdout
    assert "  input variants: the verdict above is the given inputs'; each variant opcov added is judged apart" in (
        r.stdout
    )
    assert (
        "    fails (registered evidence) with a padded attention mask: aten::bitwise_and.Tensor bool: no kernel\n"
        in (r.stdout)
    )
    assert "aten::bitwise_and.Tensor  x1" not in r.stdout  # not among the given inputs' ops

    gated = check(path, cov, "--variants", "all")
    assert gated.returncode == 1
    assert gated.stderr.splitlines() == [
        "opcov: gate failed: fake (inference): fails (registered evidence): fails on 1 op(s) (with a padded attention mask)"
    ]


def test_json_leads_with_the_given_inputs_and_maps_the_variants(tmp_path, cov):
    r = check(save(tmp_path, MASKED), cov, "--format", "json")
    v = json.loads(r.stdout)["verdicts"][0]
    assert (v["verdict"], v["variant"]) == ("runs", "given")
    assert [op["op"] for op in v["ops"]] == ["aten::mm"]
    padded = v["variants"]["padded_mask"]
    assert padded["verdict"] == "fails" and padded["evidence"] == "registered"
    assert padded["deciding"] and padded["deciding"][0].startswith("aten::bitwise_and.Tensor bool: ")
    assert v["says"].startswith("runs (registered, unverified) with the given inputs; fails (registered evidence) "
                                "with a padded attention mask: aten::bitwise_and.Tensor bool")  # fmt: skip


def test_every_format_reports_the_variants_apart(tmp_path, cov):
    path = save(tmp_path, MASKED)
    md = check(path, cov, "--format", "markdown").stdout
    assert "with a padded attention mask: aten::bitwise_and.Tensor" in md
    gh = check(path, cov, "--format", "github").stdout
    assert "::warning title=opcov fake inference%3A fails (registered evidence) with a padded attention mask" in gh
    suite = ET.fromstring(check(path, cov, "--format", "junit").stdout).find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["variant"] == "given" and props["verdict"] == "runs"
    assert props["variant.padded_mask"].startswith("fails (registered evidence) with a padded attention mask")
    assert suite.get("failures") == "0"


def test_an_op_set_without_variants_says_so_and_is_judged_as_one_set(tmp_path, cov):
    path = save(tmp_path, [{**n, "variants": ()} for n in MASKED])
    r = check(path, cov)
    assert r.returncode == 1  # bitwise_and fails, and nothing says it was opcov's own padded mask
    assert "note: input variants not recorded in this op set; judged as one set" in r.stdout
    assert "input variants:" not in r.stdout
    v = json.loads(check(path, cov, "--format", "json").stdout)["verdicts"][0]
    assert v["variant"] is None and v["variants"] == {}


def test_an_unknown_variant_name_is_one_line_naming_those_that_exist(tmp_path, cov):
    r = check(save(tmp_path, MASKED), cov, "--variants", "padded,given")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "opcov: error: --variants: 'padded' is not an input variant; choose from given, padded_mask, or all"
    )


def test_a_variant_failing_on_the_given_inputs_own_ops_says_so(tmp_path, cov):
    both = [MASKED[0], {**MASKED[1], "variants": ("given", "padded_mask")}]
    r = check(save(tmp_path, both), cov)
    assert r.returncode == 1
    assert (
        "    fails (registered evidence) with a padded attention mask, on the same ops as with the given inputs: "
        "aten::bitwise_and.Tensor bool: no kernel\n" in r.stdout
    ), r.stdout
