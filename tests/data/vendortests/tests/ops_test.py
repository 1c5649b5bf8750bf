# A fixture written for opcov's tests, in the shape of TorchTPU's op tests (tests/ops_test.py of its
# source: one test method per OpInfo calling self.do_test_op(NAME, exclude_dtypes=..., check_grad=...)).
# Not TorchTPU's code; opcov only parses it. Importing it would fail, on purpose.
import torch
import torch_tpu_that_does_not_exist  # noqa: F401  (never imported by opcov)

from tests import op_testing

COMPLEX_DTYPES = op_testing.COMPLEX_DTYPES
INTEGRAL_DTYPES = op_testing.INTEGRAL_DTYPES
CheckValueMode = op_testing.CheckValueMode


class OpsTest:
    def test_floor(self):
        self.do_test_op("floor", exclude_dtypes=INTEGRAL_DTYPES, exclude_inplace_dtypes=INTEGRAL_DTYPES)

    def test_addmm(self):
        self.do_test_op(
            "addmm", check_grad=False, exclude_dtypes={"cpu": COMPLEX_DTYPES, "gpu": (torch.bool,) + COMPLEX_DTYPES}
        )

    def test_split_copy(self):
        self.do_test_op("split_with_sizes_copy", check_dynamism=False)

    def test_pad(self):
        self.do_test_op("nn.functional.pad", variant_test_name="reflect", exclude_dtypes=(torch.float16,))

    def test_unsafe_view(self):
        self.do_test_op("torch.ops.aten._unsafe_view")

    def test_erfc(self):
        self.skipTest("not ready yet")

    def test_relu(self):
        self.do_test_op("nn.functional.relu", check_grad=False)

    def test_histc(self):
        # tested twice: the second call checks only the shapes of what the first excludes
        self.do_test_op("histc", exclude_dtypes={"cpu": INTEGRAL_DTYPES + (torch.float16,)})
        self.do_test_op("histc", exclude_dtypes={"cpu": INTEGRAL_DTYPES}, check_value=CheckValueMode.SKIP)

    def test_foreach_frac(self):
        self.skipTest("_foreach_frac is not ready yet: base op not implemented.")

    def test_sigmoid(self):
        self.do_test_op("sigmoid", check_value=CheckValueMode.LOOSE)
