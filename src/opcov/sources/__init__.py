"""What the producers read, below them: OpInfo's samples (``opinfo``), the model builders and the curated
zoo (``models`` with ``inputs``, ``nnblocks``, ``tiny`` and ``vision``; ``zoo``), a model's step (``step``: its
input variants, loss and outputs) and the computing stand-in device (``pybackend``, the pure-Python
PrivateUse1 backend). scan, probe and tracing take what they share from here and never import one another
(tests/test_import_graph.py)."""
