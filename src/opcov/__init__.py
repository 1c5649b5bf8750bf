"""opcov: which ATen operators does a PyTorch device backend really support?

Importing this package does not import torch: commands that only read coverage
data (``opcov backends``, ``opcov lint``) stay fast.
"""

__version__ = "0.1.0"
