"""``assert_runs_on``: the ``opcov check`` gate as one line in a user's own test suite.

    from opcov.testing.assertions import assert_runs_on

    def test_my_model_runs_on_tpu():
        assert_runs_on("coverage/models/my-model", "tpu")

It lives in opcov.testing (the package of test support) as a plain function rather than a pytest
plugin: a plugin entry point would be loaded into every pytest session of every environment with
opcov installed, for nothing a plain import does not give. Torch-free for saved op sets.
"""

from __future__ import annotations

from opcov import api, vocab
from opcov.errors import UsageError
from opcov.verdict.reports import fixes, problem_lines

RUNS = vocab.VERDICT_OF["ok"]


def assert_runs_on(model_or_opset, backend, mode=None, allow=(RUNS,), coverage=None) -> list:
    """Raise AssertionError unless every verdict of the model on ``backend`` is one of ``allow``.

    Arguments as for ``opcov.check`` (``backend`` may also be a list). ``allow``: verdict words
    (runs, runs_with_fallback, unknown, fails), e.g. ``("runs", "runs_with_fallback")`` to accept
    ops that run on a CPU fallback. The message names each op that made a verdict not allowed, with
    its reasons and fixes. Returns the verdicts when they pass.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    allowed = (allow,) if isinstance(allow, str) else tuple(allow)
    unknown = [a for a in allowed if a not in vocab.VERDICTS]
    if unknown or not allowed:
        raise UsageError(f"allow {allow!r}: expected verdicts among {', '.join(vocab.VERDICTS)}")
    verdicts, model = api.check_model(model_or_opset, backend, mode, coverage)
    failed = [v for v in verdicts if v.verdict not in allowed]
    if failed:
        raise AssertionError(failure_message(failed, model["name"], allowed))
    return verdicts


def failure_message(failed, name: str, allowed) -> str:
    """'llama on tpu (training): fails (allowed: runs)' and, under it, each op behind that verdict."""
    lines = []
    for v in failed:
        lines.append(f"{name} on {v.backend} ({v.mode}): {v.verdict} (allowed: {', '.join(allowed)})")
        for r in v.ops:
            word = vocab.VERDICT_OF.get(r.outcome)  # None: not judged
            if word is None or word in allowed:
                continue
            lines.append(f"  {r.op} {r.outcome} ({r.calls} calls)")
            lines += [f"    {line}" for line in problem_lines(r)]
            lines += [f"    fix: {x}" for x in fixes(r)]
    return "\n".join(lines)
