"""opcov: which ATen operators does a PyTorch device backend really support?

Importing this package does not import torch: commands that only read coverage
data (``opcov backends``, ``opcov lint``) stay fast.
"""


def __getattr__(name):
    """``opcov.trace(model, inputs, ...)`` for notebooks and ``opcov.check(model, backends)`` (the
    verdicts of ``opcov check``, see opcov/api.py), each imported only when used.

    The module opcov/tracing/trace.py imports torch only inside its functions, and opcov/api.py
    not at all for saved op sets, so this stays cheap.
    """
    if name == "__version__":  # kept in opcov.version, which what records it imports (no import cycle)
        from opcov.version import __version__

        return __version__
    if name == "trace":
        from opcov.tracing.trace import trace

        return trace
    if name == "check":
        from opcov.api import check

        return check
    raise AttributeError(f"module 'opcov' has no attribute {name!r}")
