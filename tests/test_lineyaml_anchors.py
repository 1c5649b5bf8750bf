"""The fast reader refuses what opcov never writes on every op line, not only the lines a command asked for.

A file whose integrity line matches its text (written by hand, or by another tool that stamps what it
writes) can still hold a YAML anchor or alias; with ``names`` the reader parses only the asked-for lines,
and must still send the file to the full reader, which names the line.
"""

import pytest

from opcov.errors import DataError
from opcov.store import data, lineyaml

REC = {"fwd": "kernel", "res": "registered", "bwd": "none", "bwd_res": "not_applicable"}


def _registered(ops: dict) -> dict:
    return {
        "schema_version": data.SCHEMA_VERSION,
        "evidence": "registered",
        "backend": {"name": "fake", "device_type": "fake", "dispatch_key": "PrivateUse1"},
        "provenance": {"torch": "2.13.0", "command": "opcov scan fake", "created": "2026-11-30T00:00:00+00:00"},
        "ops": ops,
    }


@pytest.mark.parametrize("mark", ["&id001 ", "*id001"])
def test_an_anchor_on_a_line_no_one_asked_for_is_refused_with_its_line(tmp_path, mark):
    text = data.dumps(_registered({"aten::a": REC, "aten::b": dict(REC, why="x")}))
    body = text.split("\n", 1)[1]  # without the integrity line: stamped again below, so it matches
    assert body.count("why: x") == 1
    body = body.replace("why: x", f"why: {mark}x" if mark.startswith("&") else f"why: {mark}")
    path = tmp_path / "registered-torch-2.13.0.yaml"
    path.write_text(data.stamped(body, 2))
    line = data.stamped(body, 2).splitlines().index(next(s for s in body.splitlines() if "aten::b" in s)) + 1
    with pytest.raises(DataError, match=rf"registered-torch-2\.13\.0\.yaml:{line}: .*YAML anchor or alias"):
        lineyaml.load(str(path), ["aten::a"])
    with pytest.raises(DataError, match="YAML anchor or alias"):
        lineyaml.load(str(path))
