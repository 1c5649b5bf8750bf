"""opcov's version, in a module of its own: what records it (trace, scan, probe) imports it from here,
not from the package, whose lazy ``opcov.trace``/``opcov.check`` import those modules (no import cycle)."""

__version__ = "0.3.0"
