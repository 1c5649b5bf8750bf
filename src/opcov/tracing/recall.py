"""Trace-vs-eager recall: how much of what a model really runs its fake-tensor op set holds.

Why: an op set is a prediction made without values; a verdict built on it is only as good as the
share of the real run's ops it contains. The real run here is the model eager on the computing
stand-in (``realtrace``: real values, composites on an accelerator's path, every dispatched op
recorded below autograd), at the same narrow configuration as the fake trace, so the two differ
only by fake-vs-real (comparing with a CPU run would differ by construction: CPU has its own kernels).
Recall per phase is |eager ∩ traced| / |eager| over op overloads; the ops eager ran that the trace
missed are listed, and so are those only the trace has (a verdict judges them needlessly).

Two recalls, since an op set is a fake trace with real-valued branch runs merged in
(``realtrace``): of the op set as saved, and of its fake-tensor part alone (cells a real run alone
saw, ``seen: real``, left out). Where the branch run used the eager run's inputs, the first is
close to 1 by construction: it shows the merge worked; the second shows what fake tensors miss.

The CPU half (``scripts/zoo_recall.py --device cpu``) compares a ``--device cpu`` fake trace with an
eager CPU run (``--real --device cpu``) at the same sizes (``unlike`` says where two op sets are not):
CPU's own kernels on both sides; a CPU op set's branch run is eager on CPU itself, so its two recalls
differ as an accelerator op set's do.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from opcov.store import opset

TARGET = 0.95  # issue 17: recall at least this per phase on 95% of architectures
COLUMNS = (
    "model",
    "mode",
    "phase",
    "eager_ops",
    "traced_ops",
    "recall",
    "fake_recall",
    "missed",
    "fake_missed",
    "extra",
)


@dataclass(frozen=True)
class PhaseRecall:
    phase: str
    eager: frozenset
    traced: frozenset  # the op set as saved
    fake: frozenset  # its fake-tensor part alone

    @property
    def recall(self) -> float:
        return len(self.eager & self.traced) / len(self.eager) if self.eager else 1.0

    @property
    def fake_recall(self) -> float:
        return len(self.eager & self.fake) / len(self.eager) if self.eager else 1.0

    @property
    def missed(self) -> list[str]:
        return sorted(self.eager - self.traced)

    @property
    def fake_missed(self) -> list[str]:
        return sorted(self.eager - self.fake)

    @property
    def extra(self) -> list[str]:
        return sorted(self.traced - self.eager)


def compare(traced: dict, eager: dict) -> list[PhaseRecall]:
    """Per phase (those either document has), the op overloads of ``eager`` (a real-valued op set)
    against those of ``traced`` (the fake-tensor one): documents as ``opset.load`` returns them."""

    def ops(doc, phase, fake_only=False):
        return frozenset(
            op
            for op, rec in doc["ops"].items()
            if phase in rec and not (fake_only and all(c.get("seen") == "real" for c in rec[phase].values()))
        )

    return [
        PhaseRecall(p, ops(eager, p), ops(traced, p), ops(traced, p, fake_only=True))
        for p in opset.PHASES
        if ops(eager, p) or ops(traced, p)
    ]


def unlike(traced: dict, eager: dict) -> str:
    """Why two op sets of one architecture are not like for like ('' where they are): their ``opcov
    trace`` lines differ by more than ``--real`` and ``--out`` (other sizes, repairs, inputs), or they
    built models of other sizes (a head the fake build fell back from: other parameters). Their
    recall would then measure the difference in what was built, not fake-vs-real."""

    def line(doc):
        words, out = shlex.split(doc["provenance"].get("command") or ""), []
        while words:
            word = words.pop(0)
            if word == "--out":
                words = words[1:]
            elif word != "--real":
                out.append(word)
        return out

    a, b = line(traced), line(eager)
    if a != b:
        diff = [w for w in a if w not in b] + [w for w in b if w not in a]
        return f"traced at other sizes than the eager run ({' '.join(diff[:6]) or 'the order of options'})"
    pa, pb = traced["model"].get("params"), eager["model"].get("params")
    if pa != pb:
        return f"another model was built: {pa} parameters traced, {pb} run eager"
    return ""


def row_text(model: str, mode: str, r: PhaseRecall) -> str:
    return "\t".join(
        [
            model,
            mode,
            r.phase,
            str(len(r.eager)),
            str(len(r.traced)),
            f"{r.recall:.3f}",
            f"{r.fake_recall:.3f}",
            ",".join(r.missed),
            ",".join(r.fake_missed),
            ",".join(r.extra),
        ]
    )


def summary(rows: list[tuple[str, str, PhaseRecall]], fake: bool = False) -> dict:
    """Per phase: (architecture-modes at or over TARGET, all of them, the mean recall), of the op set
    as saved, or of its fake part alone (``fake``)."""
    out = {}
    for phase in opset.PHASES:
        these = [r.fake_recall if fake else r.recall for _, _, r in rows if r.phase == phase]
        if these:
            out[phase] = (sum(x >= TARGET for x in these), len(these), sum(these) / len(these))
    return out
