"""The memos that make judging a whole zoo fast keep every verdict what it was without them."""

import os

import pytest

from opcov.store import layout, opset
from opcov.verdict import judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COVERAGE = os.path.join(ROOT, "coverage")


def _finding(outcome, evidence="probed"):
    return judge.Finding("forward", "float32", outcome, evidence, "why")


def test_op_result_outcome_follows_its_findings():
    r = judge.OpResult("aten::mm", findings=[_finding("ok")])
    assert (r.outcome, r.evidence) == ("ok", "probed")
    r.findings.append(_finding("fails", "registered"))  # an append is seen
    assert (r.outcome, r.evidence) == ("fails", "registered")
    r.findings = [_finding("fallback", "declared")]  # so is a new list
    assert (r.outcome, r.evidence) == ("fallback", "declared")
    r.findings = []
    assert (r.outcome, r.evidence) == (judge.NOT_JUDGED, "none")


def _view(v):
    return (
        v.verdict,
        v.evidence,
        v.counts(),
        v.notes,
        v.sources,
        [(r.op, r.calls, sorted(r.phases), sorted(r.dtypes), r.findings, r.flags) for r in v.ops],
    )


@pytest.mark.skipif(not layout.model_files(COVERAGE), reason="no bundled op sets")
@pytest.mark.parametrize("backend", ["tpu", "xla", "cpu"])
def test_shared_judgments_give_the_verdicts_of_a_lone_check(backend):
    files = sorted(layout.model_files(COVERAGE), key=os.path.getsize)[-4:]  # the largest: most ops shared
    pool, listings, docs = {}, {}, {}

    def read_once(path, _names):  # as gaps reads: each file once, whole
        if path not in docs:
            docs[path] = judge.read_ops(path, None)
        return docs[path]

    for path in files:
        doc = opset.load(path)
        alone = judge.judge(doc, judge.coverage_for(doc, backend, COVERAGE))
        shared = judge.judge(
            doc, judge.share(judge.coverage_for(doc, backend, COVERAGE, read=read_once, listings=listings), pool)
        )
        assert _view(shared) == _view(alone), path
    assert len(pool) == 1  # every op set of one torch judged against the same documents


def test_bulk_restores_the_collector():
    import gc

    assert gc.isenabled()
    with judge.bulk():
        assert not gc.isenabled()
        with judge.bulk():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_bulk_freezes_what_was_made_only_when_the_caller_keeps_it():
    # the opcov site program keeps its build until it exits: frozen, no collection walks it; any other
    # caller's objects stay collectable (frozen cycles would never be freed)
    import gc

    class Cycle:
        pass

    def cycle():
        a, b = Cycle(), Cycle()
        a.b, b.a = b, a

    gc.collect()
    frozen = gc.get_freeze_count()
    try:
        with judge.bulk():
            cycle()
        assert gc.get_freeze_count() == frozen and gc.collect() >= 2  # the cycle was collectable
        with judge.bulk(kept=True):
            with judge.bulk(kept=True):  # an inner bulk leaves the outer one to decide
                kept = [Cycle() for _ in range(100)]
            assert gc.get_freeze_count() == frozen and not gc.isenabled()
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + 100 and len(kept) == 100
    finally:
        gc.unfreeze()
