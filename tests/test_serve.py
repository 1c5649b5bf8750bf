"""Serve mode: a decoder's prefill and decode steps through transformers' generate (static and dynamic KV
cache, greedy and sampling), recorded apart as the phases ``prefill`` and ``decode`` and judged like
inference. Two model families (llama, gpt2), so the rule is not tuned on one."""

import json
import os

import pytest
from conftest import ROOT, opcov_here, run_opcov

from opcov.errors import UsageError
from opcov.store import opset
from opcov.tracing import serve

FAMILIES = ("llama", "gpt2")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """name -> (path, op-set document): each family traced in serve mode once (a child process each: the
    real-valued trace runs on the computing stand-in)."""
    from opcov.tracing.spec import trace_spec

    out = {}
    folder = tmp_path_factory.mktemp("serve")
    for name in FAMILIES:
        path = str(folder / f"{name}-serve.yaml")
        trace_spec(name, mode="serve", out=path).save(path)
        out[name] = (path, opset.load(path))  # what was written reads back, validated
    return out


def ops_under(doc, phase, root_prefix, inside=None):
    """Kernel ops of ``phase`` below a run's root node (``generate:<run>``), only those below a call node
    named ``inside`` where given."""
    nodes = opset.nodes(doc)
    by_id = {n.id: n for n in nodes}

    def chain(n):
        while n.parent is not None:
            n = by_id[n.parent]
            yield n

    found = set()
    for n in nodes:
        if n.phase != phase or n.kind != opset.KERNEL:
            continue
        up = list(chain(n))
        if not up or not up[-1].op.startswith(root_prefix):
            continue
        if inside is not None and not any(a.op == inside for a in up):
            continue
        found.add(n.op)
    return found


@pytest.mark.parametrize("name", FAMILIES)
def test_prefill_and_decode_are_recorded_apart(served, name):
    _, doc = served[name]
    assert doc["mode"] == "serve" and doc["optimizer"] == "none"
    assert doc["provenance"]["tracing"] == "real"  # generate reads token values: never fake
    phases = {phase for rec in doc["ops"].values() for phase in rec}
    assert phases == {"prefill", "decode"}
    calls = doc["summary"]["calls"]
    assert calls["prefill"] > 0 and calls["decode"] > 0 and calls["forward"] == 0
    # every run: one prefill forward and NEW_TOKENS - 1 decode forwards of the model
    runs = doc["serve"]["runs"]
    assert set(runs) == {run.name for run in serve.RUNS}
    assert all(r["forwards"] == serve.NEW_TOKENS for r in runs.values())
    assert {n.split("-")[0]: r["cache_class"] for n, r in runs.items()} == {
        "static": "StaticCache",
        "dynamic": "DynamicCache",
    }
    roots = {(n.phase, n.op) for n in opset.nodes(doc) if n.parent is None}
    assert roots == {(p, f"generate:{run.name}") for p in ("prefill", "decode") for run in serve.RUNS}
    assert doc["model"]["config"]["seq"] == serve.PROMPT


@pytest.mark.parametrize("name", FAMILIES)
def test_decode_updates_the_cache_and_picks_tokens(served, name):
    _, doc = served[name]
    # the static cache writes the step's keys and values in place; the dynamic one concatenates them
    static = ops_under(doc, "decode", "generate:static-", inside=serve.CACHE_UPDATE)
    dynamic = ops_under(doc, "decode", "generate:dynamic-", inside=serve.CACHE_UPDATE)
    assert "aten::index_copy_" in static and "aten::cat" not in static
    assert "aten::cat" in dynamic and "aten::index_copy_" not in dynamic
    # token selection is generate's own work, outside the model: argmax greedy, topk + multinomial sampling
    greedy = ops_under(doc, "decode", "generate:static-greedy") - ops_under(
        doc, "decode", "generate:static-greedy", inside=serve.MODEL
    )
    sampled = ops_under(doc, "decode", "generate:dynamic-sample") - ops_under(
        doc, "decode", "generate:dynamic-sample", inside=serve.MODEL
    )
    assert "aten::argmax" in greedy and "aten::multinomial" not in greedy
    assert {"aten::topk", "aten::multinomial", "aten::_softmax"} <= sampled and "aten::argmax" not in sampled
    # the model itself runs in both phases: its matmuls in decode too
    assert "aten::mm" in ops_under(doc, "decode", "generate:", inside=serve.MODEL) or "aten::addmm" in ops_under(
        doc, "decode", "generate:", inside=serve.MODEL
    )


def test_the_two_families_differ_where_their_code_does(served):
    """Not one model's op list: llama's rotary embedding (cos, sin) and gpt2's learned positions differ."""
    llama, gpt2 = (set(served[n][1]["ops"]) for n in FAMILIES)
    assert {"aten::cos", "aten::sin"} <= llama - gpt2
    assert llama & gpt2 >= {"aten::index_copy_", "aten::topk", "aten::multinomial", "aten::argmax"}


@pytest.mark.parametrize("name", FAMILIES)
def test_check_names_the_serving_ops_with_evidence(served, name):
    path, _ = served[name]
    r = opcov_here("check", path, "-b", "tpu", "--mode", "serve", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    v = next(v for v in report["verdicts"] if v["backend"] == "tpu")
    assert v["mode"] == "serve"
    notes = v["notes"]
    head = next(n for n in notes if n.startswith("serve: prefill needs"))
    assert "decode" in head
    cache = next(n for n in notes if n.startswith("serve decode, the KV cache's update"))
    assert "aten::index_copy_" in cache and "aten::cat" in cache and "evidence" in cache
    picks = next(n for n in notes if n.startswith("serve decode, generate's own work"))
    for op in ("aten::topk", "aten::multinomial", "aten::argmax"):
        assert op in picks
    # each op's phases are in its result: the sampling ops are needed in decode
    phases = {o["op"]: set(o["phases"]) for o in v["ops"]}
    assert "decode" in phases["aten::topk"] and "decode" in phases["aten::index_copy_"]
    assert set().union(*phases.values()) <= {"prefill", "decode"}


def test_check_text_report_says_serve(served):
    path, _ = served["llama"]
    r = opcov_here("check", path, "-b", "tpu")
    assert r.returncode in (0, 1), r.stderr
    assert "tpu (serve):" in r.stdout
    assert "note: serve decode, the KV cache's update:" in r.stdout


# ---------------------------------------------------------------- refusals and the format


def test_serve_needs_real_values():
    import torch

    from opcov.tracing.trace import trace

    with pytest.raises(UsageError, match="serve.*real values"):
        trace(torch.nn.Linear(2, 2), {"input_ids": torch.zeros(1, 2, dtype=torch.long)}, mode="serve")


def test_a_model_that_cannot_generate_is_refused():
    import torch

    with pytest.raises(UsageError, match="cannot generate"):
        serve.check_model(torch.nn.Linear(2, 2))


def test_prompt_is_cut_or_repeated_to_its_length():
    import torch

    short = serve.prompt_inputs(torch, {"input_ids": torch.arange(6).reshape(2, 3)}, None)
    assert short["input_ids"].shape == (2, serve.PROMPT) and short["attention_mask"].sum() == 2 * serve.PROMPT
    made = serve.prompt_inputs(torch, {}, None)  # no input_ids: random tokens of the vocabulary
    assert made["input_ids"].shape == (2, serve.PROMPT)


def test_serve_phases_read_back_and_other_phases_are_refused(tmp_path, served):
    _, doc = served["gpt2"]
    bad = tmp_path / "bad.yaml"
    text = opset.dumps(doc).replace(" decode ", " decoding ", 1)
    bad.write_text(text)
    problems = opset.validate(__import__("yaml").safe_load(text), str(bad))
    assert any("unknown phase 'decoding'" in p.message for p in problems)


def test_summary_keeps_the_step_phases_and_adds_serving_ones_only_where_called():
    assert opset.phase_calls({"forward": 3}) == {"forward": 3, "backward": 0, "optimizer": 0}
    assert opset.phase_calls({"prefill": 2, "decode": 5}) == {
        "forward": 0,
        "backward": 0,
        "optimizer": 0,
        "prefill": 2,
        "decode": 5,
    }


# ---------------------------------------------------------------- the command line and the zoo's serve op sets


def test_the_command_line_says_what_serve_does_not_record_yet():
    r = run_opcov("trace", "llama", "--mode", "serve", "--on", "cpu")
    assert r.returncode == 2 and "not recorded on a backend itself yet" in r.stderr
    r = run_opcov("zoo", "trace", "--mode", "serve", "--all")
    assert r.returncode == 2 and "takes no --all" in r.stderr


ZOO_SERVE = os.path.join(ROOT, "coverage", "models")


@pytest.mark.parametrize("name", serve.ZOO)
def test_the_zoo_holds_a_serve_op_set_per_curated_decoder(name):
    path = os.path.join(ZOO_SERVE, name, "serve.yaml")
    doc = opset.load(path)
    assert doc["mode"] == "serve" and doc["model"]["name"] == name
    command = doc["provenance"]["command"]  # the zoo entry's dtype (bfloat16 for the MoE models) where not float32
    assert command.startswith(f"opcov trace {name} --mode serve") and command.endswith(
        f"--out coverage/models/{name}/serve.yaml"
    )
    assert {phase for rec in doc["ops"].values() for phase in rec} == {"prefill", "decode"}
    # a KV cache is written in every step; mamba's decode step writes its states in place inside its own
    # kernels (causal_conv1d_update, selective_state_update), outside the Cache's methods: prefill only
    phases = {n.phase for n in opset.nodes(doc) if n.op == serve.CACHE_UPDATE}
    assert phases == ({"prefill"} if name == "mamba" else {"prefill", "decode"})


def test_check_a_zoo_decoder_by_name_in_serve_mode():
    r = opcov_here("check", "llama", "-b", "tpu", "--mode", "serve")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tpu (serve):" in r.stdout and "note: serve decode, the KV cache's update:" in r.stdout
    assert "aten::index_copy_" in r.stdout and "aten::multinomial" in r.stdout


# ---------------------------------------------------------------- the compiled decode step


def test_compiled_decode_step_names_its_recompilations_and_tpus_rule(tmp_path):
    out = str(tmp_path / "tpu-serve.yaml")
    r = run_opcov("trace", "gpt2", "--mode", "serve", "--path", "compile", "--compile-backend", "tpu", "--out", out)
    assert r.returncode == 0, r.stderr
    assert "Recompiling" not in r.stdout + r.stderr  # Dynamo's own log lines stay off the terminal
    doc = opset.load(out)
    rec = doc["compile"]
    assert doc["path"] == "compile" and rec["outcome"] == "compiled"
    assert {n.phase for n in opset.nodes(doc)} == {"prefill", "decode"}
    # a static cache recompiles once (the prompt's length to one token); a dynamic one at every decode step
    static = [x for x in rec["recompiles"] if x["cache"] == "static"]
    assert [x["phase"] for x in static] == ["decode"] and "input_ids" in static[0]["reason"]
    dynamic = [x for x in rec["recompiles"] if x["cache"] == "dynamic"]
    assert len(dynamic) == serve.NEW_TOKENS - 1
    # its length marked dynamic with bounds (TorchTPU's bounded dynamism), the decode steps share one graph
    bounded = [x for x in rec["recompiles"] if x["cache"] == "dynamic-bounded"]
    assert [x["step"] for x in bounded] == [1]
    assert "aten::index_copy" in doc["ops"]  # the static cache's update, functional in the AOT graph
    finding = next(n for n in rec["serve"] if n.startswith("tpu:"))
    assert "bounded dynamism" in finding and "dynamic=True" in finding and "share one graph" in finding
    r = opcov_here("check", out, "-b", "tpu", "--path", "compile")
    assert "bounded dynamism" in r.stdout and "serve, static cache: 1 recompilation" in r.stdout


@pytest.mark.parametrize("name", serve.ZOO)
def test_the_zoo_holds_each_decoders_compiled_decode_step_for_tpu(name):
    doc = opset.load(os.path.join(ZOO_SERVE, name, "compile", "tpu-serve.yaml"))
    rec = doc["compile"]
    assert doc["mode"] == "serve" and rec["backend"] == "tpu" and rec["outcome"] in opset.COMPILE_OUTCOMES
    if rec["outcome"] == "compiled":
        assert any(n.startswith("serve, static cache:") for n in rec["serve"])


def test_check_a_zoo_decoders_compiled_decode_step_by_name():
    r = opcov_here("check", "llama", "-b", "tpu", "--mode", "serve", "--path", "compile")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "tpu serve (compile path, tpu)" in r.stdout and "bounded dynamism" in r.stdout


def test_a_missing_compiled_serve_op_set_names_the_trace_that_makes_it(tmp_path):
    """The suggested command makes the serve op set asked for (trace's default mode is inference)."""
    import shutil

    folder = tmp_path / "mydecoder" / "compile"
    folder.mkdir(parents=True)
    shutil.copy(os.path.join(ZOO_SERVE, "llama", "compile", "inductor-inference.yaml"), folder)
    r = opcov_here("check", str(tmp_path / "mydecoder"), "-b", "cpu", "--mode", "serve", "--path", "compile")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "make one with 'opcov trace mydecoder --mode serve --path compile --compile-backend inductor'" in r.stderr
