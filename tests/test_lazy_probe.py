"""A lazy backend's probe rules (opcov.probe.lazy; PyTorch/XLA's record) without torch_xla: the sample cap,
the fallback status and where it is filed, the hooks off a lazy device, a new backend made lazy by its record
alone, and how check judges a probed fallback cell. The real runs are scripts/envs/xla-data.sh's (they need the
multi-GB .envs/xla)."""

from __future__ import annotations

import pytest

from opcov import backends
from opcov.probe import lazy
from opcov.probe.caserecord import CaseRecord
from opcov.probe.results import build_ops
from opcov.probe.sample import Loaded, Sample


@pytest.fixture
def active(monkeypatch):
    """xla's state as a worker on xla has it, with ``fell`` ops read at the last sync."""

    def set_fell(fell):
        monkeypatch.setitem(lazy._state, "active", backends.get_backend("xla").lazy)
        monkeypatch.setitem(lazy._state, "fell", list(fell))

    monkeypatch.setattr(lazy, "forget", lambda: lazy._state.update(fell=[]))  # no torch_xla to clear
    return set_fell


def _loaded(n, tiers=()):
    samples = [Sample(i, (), {}) for i in range(n)]
    for t in tiers:
        s = Sample(99, (), {})
        s.tier = t
        samples.append(s)
    return Loaded(None, samples, ("aten::mul",), False, True, False)


def test_cap_keeps_three_plain_samples_and_every_tier_on_xla_only(monkeypatch):
    monkeypatch.delenv("OPCOV_XLA_MAX_SAMPLES", raising=False)
    capped = lazy.cap(_loaded(7, ("special",)), "xla", "mul")
    assert [s.input for s in capped.samples] == [0, 1, 2, 99]
    assert len(lazy.cap(_loaded(7), "cpu", "mul").samples) == 7
    assert len(lazy.cap(_loaded(7), "xla", "trace.llama").samples) == 7  # each call is another op
    monkeypatch.setenv("OPCOV_XLA_MAX_SAMPLES", "5")
    assert len(lazy.cap(_loaded(7), "xla", "mul").samples) == 5
    monkeypatch.setenv("OPCOV_XLA_MAX_SAMPLES", "zero")
    with pytest.raises(ValueError, match="OPCOV_XLA_MAX_SAMPLES"):
        lazy.max_samples(backends.get_backend("xla"))


def test_a_pass_with_a_fallback_becomes_fallback_and_a_failure_stays(active):
    active(["aten::nonzero"])
    part = {"status": "pass", "ops": []}
    lazy.mark(part)
    assert part["status"] == "fallback" and part["fallback"] == ["aten::nonzero"]
    assert "aten::nonzero" in part["why"] and "values pass" in part["why"]
    active(["aten::median"])
    bad = {"status": "mismatch", "why": "values differ"}
    lazy.mark(bad)
    assert bad["status"] == "mismatch" and bad["fallback"] == ["aten::median"]
    active([])
    ok = {"status": "pass"}
    lazy.mark(ok)
    assert ok == {"status": "pass"}


def test_off_xla_the_hooks_do_nothing(monkeypatch):
    monkeypatch.setitem(lazy._state, "active", None)
    part = {"status": "pass"}
    lazy.mark(part)
    assert part == {"status": "pass"}
    assert lazy.sync_for("cpu", "default") == "default"
    assert lazy.fallback_reader("cpu")() == []


def test_a_backend_is_lazy_by_its_record_alone(monkeypatch):
    """A backend opcov does not ship, whose record has a ``lazy`` section, gets the sync, the fallback counts,
    the sample cap and the notes, with nothing else named anywhere."""
    counts = {"fell": ["aten::_helper", "aten::host_read"], "cleared": 0, "synced": 0}

    def clear():
        counts["cleared"] += 1

    rec = backends.Backend(
        "lazydev",
        "lazydev",
        "PrivateUse1",
        module="lazydev_module",
        sync=lambda torch: counts.update(synced=counts["synced"] + 1),
        lazy=backends.Lazy(
            "LazyDev", samples=2, host_reads=("aten::host_read",), clear=clear, fell_back=lambda: counts["fell"]
        ),
    )
    monkeypatch.setattr(backends, "_REGISTERED", [rec])
    monkeypatch.setitem(lazy._state, "active", None)
    sync = lazy.sync_for("lazydev", "default")
    assert sync != "default" and lazy.record_for("lazydev") is not None
    sync()
    assert counts["synced"] == 1 and lazy._state["fell"] == ["aten::_helper"]  # the host read left out
    part = {"status": "pass"}
    lazy.mark(part)
    assert part["status"] == "fallback" and "LazyDev's CPU fallback (aten::_helper)" in part["why"]
    monkeypatch.delenv("OPCOV_LAZYDEV_MAX_SAMPLES", raising=False)
    assert len(lazy.cap(_loaded(7), "lazydev", "mul").samples) == 2
    notes = " ".join(lazy.provenance_notes(rec))
    assert "LazyDev: at most 2 samples" in notes and "OPCOV_LAZYDEV_MAX_SAMPLES" in notes
    assert "no storage" not in notes  # its record keeps storage
    assert lazy.alias_key(object()) is None
    monkeypatch.setitem(lazy._state, "active", None)


def test_a_fallback_is_filed_under_the_op_it_is_about_and_the_fallen_back_op_only():
    rec = CaseRecord(
        "nonzero|float32|0",
        "nonzero|float32",
        "nonzero",
        "float32",
        ["aten::nonzero"],
        fwd={
            "ops": [["aten::nonzero", "float32"], ["aten::clone", "float32"], ["aten::_helper", "float32"]],
            "status": "fallback",
            "fallback": ["aten::_helper"],
            "why": "ran through",
        },
    )
    ops = build_ops([rec], [], lambda name, probed: {"skipped": "no_source"})
    assert ops["aten::nonzero"]["float32"]["fwd"] == "fallback"
    assert ops["aten::_helper"]["float32"]["fwd"] == "fallback"
    assert "aten::clone" not in ops  # it ran on the device: the case says nothing against it
    # out=: XLA counts the functional overload that fell back; the .out overload CPU ran is filed
    rec.out = {
        "ops": [["aten::clone", "float32"], ["aten::_helper.out", "float32"]],
        "status": "fallback",
        "fallback": ["aten::_helper"],
        "why": "ran through",
    }
    ops = build_ops([rec], [], lambda name, probed: {"skipped": "no_source"})
    assert ops["aten::_helper.out"]["float32"]["fwd"] == "fallback" and "aten::clone" not in ops


def test_check_judges_a_probed_fallback_cell_runs_with_fallback():
    from opcov import vocab
    from opcov.verdict import judge

    assert "fallback" not in vocab.PROBED_FAILURES and "fallback" not in vocab.PROBED_RAN
    cell = {
        "fwd": "fallback",
        "case": "nonzero|float32|0",
        "cases": 3,
        "samples": ["nonzero"],
        "why": "ran through PyTorch/XLA's CPU fallback (aten::nonzero); the values pass",
    }
    probed = {"evidence": "probed", "provenance": {"torch": "2.9.0"}, "ops": {"aten::nonzero": {"float32": cell}}}
    cov = judge.Coverage("xla", None, probed, ["xla/probed.yaml"])
    found = judge.judge_requirement(cov, "aten::nonzero", "float32", "forward", "2.9.0")
    assert (found.outcome, found.evidence) == ("fallback", "probed"), found
    assert "aten::nonzero" in found.why and vocab.PROBED["fallback"].label in found.why


def _kept_classes(source):
    """The path classes of the samples the xla cap keeps of an OpInfo group at float32, in the order they run."""
    import torch

    from opcov.probe import pick
    from opcov.probe.cases import load_group

    loaded = load_group({"source": source, "dtype": "float32", "id": f"{source}|float32", "backward": True})
    plain = [s for s in loaded.samples if s.tier is None]
    kept = lazy.cap(loaded, "xla", source).samples
    return plain, [pick.classes(s, loaded.fn, loaded.aten_of(s), torch) for s in kept]


def test_the_cap_keeps_one_sample_per_class_the_common_path_first(monkeypatch):
    """OpInfo lists amax's 0-d samples first: a cap that kept the first three never ran the reduction of a
    tensor with dimensions that models make, with or without keepdim (xla raised on each 0-d case, and every
    model's amax came out unknown). The cap keeps a tensor with dimensions first, and both keepdim paths."""
    monkeypatch.delenv("OPCOV_XLA_MAX_SAMPLES", raising=False)
    plain, kept = _kept_classes("amax")
    assert len(plain) > 3 and len(kept) == 3
    zero_d = [any(z for _, (shape, _) in k for z, *_ in shape) for k in kept]
    assert zero_d[:2] == [False, False]  # dimensions first; a 0-d case still runs, last
    kinds = {kinds for k in kept[:2] for _, (_, kinds) in k}
    assert kinds == {(), (("keepdim", "True"),)}


def test_the_cap_runs_a_plain_call_before_an_empty_tensor_or_unusual_arguments(monkeypatch):
    """A second family: roll's first OpInfo sample is an empty tensor (PyTorch/XLA dies on it with SIGFPE,
    which stopped the group's later cases), avg_pool3d's second and third set ceil_mode, divisor_override and
    padding at once. The kept samples start with a non-empty call at default selectors and differ in class."""
    monkeypatch.delenv("OPCOV_XLA_MAX_SAMPLES", raising=False)
    for source in ("roll", "nn.functional.avg_pool3d"):
        _, kept = _kept_classes(source)
        assert len(kept) == 3 and len(set().union(*kept)) >= 3, source
        _, (shape, _) = next(iter(kept[0]))
        assert not any(empty or zero for zero, empty, *_ in shape), source
        assert all(len(kinds) <= 1 for _, (_, kinds) in kept[0]), (source, kept[0])


def test_a_kept_samples_case_id_is_its_place_among_the_samples_as_made(monkeypatch):
    """An id names one sample whatever a cap kept: 'amax|float32|4' is OpInfo's fifth sample in a capped run and in
    an uncapped one, so cells merged from runs with other caps never give two samples one id."""
    from opcov.probe.cases import load_group
    from opcov.probe.sample import case_ids

    monkeypatch.delenv("OPCOV_XLA_MAX_SAMPLES", raising=False)
    group = {"source": "amax", "dtype": "float32", "id": "amax|float32", "backward": True}
    whole = load_group(group).samples
    kept = lazy.cap(load_group(group), "xla", "amax").samples
    ids = case_ids("amax|float32", kept)
    assert ids[0] != "amax|float32|0" and len(set(ids)) == len(ids)
    for cid, sample in zip(ids, kept):
        same = whole[int(cid.rsplit("|", 1)[1])]
        assert tuple(same.input.shape) == tuple(sample.input.shape) and same.kwargs == sample.kwargs


def test_a_higher_cap_adds_samples_only_for_classes_not_yet_kept(monkeypatch):
    """With room for 6, amax keeps one sample per class it has (4 here: with and without keepdim, 0-d and not),
    not 6; mean keeps its 6 paths (mean() and mean(dim), each with and without keepdim, 0-d and not), and
    gelu, whose 8 samples take 2 paths, keeps 3, for more shapes and values."""
    monkeypatch.setenv("OPCOV_XLA_MAX_SAMPLES", "6")
    for source, expect, paths in (("amax", 4, 4), ("mean", 6, 6), ("nn.functional.gelu", 3, 2)):
        plain, kept = _kept_classes(source)
        assert len(plain) > 6 and len(kept) == expect, (source, len(kept))
        assert len(set().union(*kept)) == paths, source
