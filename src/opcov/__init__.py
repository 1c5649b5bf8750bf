"""opcov: which ATen operators does a PyTorch device backend really support?

Importing this package does not import torch: commands that only read coverage
data (``opcov backends``, ``opcov lint``) stay fast.
"""

__version__ = "0.2.0"


def __getattr__(name):
    """``opcov.trace(model, inputs, ...)`` for notebooks, imported (with torch) only when used.

    ``opcov.trace`` is the module opcov/trace.py, made callable: calling it calls ``trace.trace``.
    """
    if name == "trace":
        import importlib

        return importlib.import_module("opcov.trace")
    raise AttributeError(f"module 'opcov' has no attribute {name!r}")
