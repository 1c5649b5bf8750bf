# A fixture written for opcov's tests, in the shapes TorchTPU's tests/op_testing.py really has: dtype
# groups annotated Final, and the compile-only deny list kept inside the function that asks whether the
# compiled mode supports an op (entries with '.out' name the out= form only). Not TorchTPU's code.
from typing import Final

import torch

COMPLEX_DTYPES: Final = (torch.complex64,)
FLOAT_DTYPES: Final = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
INTEGRAL_DTYPES: Final = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)
NUMERIC_DTYPES: Final = (*COMPLEX_DTYPES, *FLOAT_DTYPES, *INTEGRAL_DTYPES)


def _compiled_supports_op(op, device_op_input, variant) -> bool:
    compiled_deny_list = [
        "nonzero",
        "normal.out",
    ]
    key = op.name
    return key not in compiled_deny_list


raise SystemExit("a fixture: never run")
