"""The dtype key that joins a model's op calls with per-dtype coverage (see docs/DATA.md).

Torch-free on purpose: ``opcov check`` on a saved op set must not import torch.
"""

from __future__ import annotations

FLOATING = (
    "float64",
    "float32",
    "bfloat16",
    "float16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "complex128",
    "complex64",
    "complex32",
)
NONE = "none"


def dtype_name(dtype) -> str:
    """'float32' for torch.float32 (str(torch.float32) is 'torch.float32')."""
    return str(dtype).rsplit(".", 1)[-1]


def call_dtype(input_dtypes, output_dtypes=()) -> str:
    """The key of one call: first floating/complex input, else first input, else first output."""
    inputs = [d for d in input_dtypes if d]
    for d in inputs:
        if d in FLOATING:
            return d
    if inputs:
        return inputs[0]
    for d in output_dtypes:
        if d:
            return d
    return NONE
