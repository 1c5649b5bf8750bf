# A fixture written for opcov's tests, in the shape of TorchTPU's op-test module (tests/op_testing.py of
# its source: dtype groups as tuples of torch dtypes, a group built by unpacking others). Not TorchTPU's
# code; opcov only parses it.
import torch

COMPLEX_DTYPES = (torch.complex64,)
FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
INTEGRAL_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)
NUMERIC_DTYPES = (*COMPLEX_DTYPES, *FLOAT_DTYPES, *INTEGRAL_DTYPES)
COMPILE_DENYLIST = frozenset({"nonzero", "masked_select"})
BOUNDED_DYNAMISM_DENYLIST = ("topk",)

raise SystemExit("a fixture: never run")
