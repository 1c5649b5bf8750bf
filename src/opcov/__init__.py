"""opcov: which ATen operators does a PyTorch device backend really support?

Importing this package does not import torch: commands that only read coverage
data (``opcov backends``, ``opcov lint``) stay fast.
"""

__version__ = "0.2.0"


def __getattr__(name):
    """``opcov.trace(model, inputs, ...)`` for notebooks, imported (with torch) only when used.

    The module opcov/tracing/trace.py imports torch only inside its functions, so this stays cheap.
    """
    if name == "trace":
        from opcov.tracing.trace import trace

        return trace
    raise AttributeError(f"module 'opcov' has no attribute {name!r}")
