"""JUnit XML: one testsuite per backend and mode, one testcase per op (CI systems render these).

A passing testcase is not proof that the op runs: each testcase's system-out names the evidence it
was judged from, and the suite's properties hold the verdict, its evidence and what it says.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from opcov import vocab
from opcov.verdict.reports import fixes, headline, problem_lines, variant_line


def report(verdicts, model: dict) -> str:
    root = ET.Element("testsuites", name=f"opcov check {model['name']}")
    for v in verdicts:
        c = v.counts()
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"{model['name']}.{v.backend}.{v.mode}",
            tests=str(len(v.ops)),
            failures=str(c["fails"]),
            skipped=str(c["unknown"] + c["not_judged"]),
        )
        ET.SubElement(suite, "properties")
        for key, value in (
            ("verdict", v.verdict),
            ("evidence", v.evidence),
            ("says", v.says()),
            ("headline", headline(v)),
            ("data", ", ".join(v.sources)),
            ("variant", v.variant or "not recorded"),
            *((f"variant.{name}", variant_line(other, v)) for name, other in v.variants.items()),
        ):
            ET.SubElement(suite[0], "property", name=key, value=value)
        for r in v.ops:
            case = ET.SubElement(suite, "testcase", classname=f"{v.backend}.{v.mode}", name=r.op)
            said = vocab.verdict_words(r.outcome, r.evidence)
            text = "\n".join(problem_lines(r) + [f"fix: {x}" for x in fixes(r)])
            if r.outcome == "fails":
                ET.SubElement(case, "failure", message=f"{said}: {problem_lines(r)[0]}", type="fails").text = text
            elif r.outcome in ("unknown", "not_judged"):
                msg = problem_lines(r)[0] if r.problems() else r.findings[0].why
                ET.SubElement(case, "skipped", message=f"{said}: {msg}")
            evidence = f"evidence: {vocab.evidence_word(r.evidence).short}"
            ET.SubElement(case, "system-out").text = (
                f"{evidence}\n{text}" if r.outcome in ("fallback", "value_note") else evidence
            )
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
