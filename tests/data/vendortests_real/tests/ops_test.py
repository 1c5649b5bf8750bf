# A fixture written for opcov's tests: a few test methods in the shapes TorchTPU's tests/ops_test.py
# really has (read from a public copy of its source): a skipTest under an `if` before do_test_op, a
# conditional expression for exclude_dtypes, check_value as one mode per output, a skip decorator and
# a do_test_op inside a `with`, a skipTest whose message names another op. Not TorchTPU's code; opcov
# only parses it. Importing it would fail, on purpose.
import torch
import torch_tpu_that_does_not_exist  # noqa: F401  (never imported by opcov)

from tests import op_testing

COMPLEX_DTYPES = op_testing.COMPLEX_DTYPES
INTEGRAL_DTYPES = op_testing.INTEGRAL_DTYPES
CheckValueMode = op_testing.CheckValueMode
env = op_testing.env
attention = op_testing.attention


class TestOps(op_testing.TorchTpuTestBase):
    def test_linalg_lu_out(self):
        if op_testing._TORCH_TPU_DEVICE.value != "tpu":
            self.skipTest(f"linalg.lu is not implemented on {op_testing._TORCH_TPU_DEVICE.value}.")
        self.do_test_op(
            "linalg.lu",
            check_grad=False,
            exclude_dtypes=INTEGRAL_DTYPES + (torch.half, torch.bfloat16),
            check_value=CheckValueMode.LOOSE,
        )

    def test_nll_loss_forward(self):
        self.do_test_op(
            "nn.functional.nll_loss",
            exclude_dtypes=(None if env.IS_INTERNAL_TORCH_TPU else INTEGRAL_DTYPES),
            check_grad=False,
        )

    def test_sort(self):
        self.do_test_op(
            "sort",
            check_out_variant=False,
            check_value=[CheckValueMode.STRICT, CheckValueMode.SKIP],
            exclude_dtypes=COMPLEX_DTYPES,
            check_device=False,
        )

    def test_topk(self):
        self.do_test_op("topk", exclude_dtypes={"cpu": (torch.bool,) + COMPLEX_DTYPES}, skip_output_indices=[1])

    @op_testing.skip_if_torch_tpu_vs_gpu_mode
    def test_nn_functional_scaled_dot_product_attention_math(self):
        with attention.sdpa_kernel(attention.SDPBackend.MATH):
            self.do_test_op(
                "nn.functional.scaled_dot_product_attention",
                check_value=CheckValueMode.LOOSE,
                exclude_dtypes=INTEGRAL_DTYPES,
            )

    @op_testing.skip_if_torch_tpu_vs_gpu_mode
    def test_nn_functional_scaled_dot_product_attention_flash(self):
        with attention.sdpa_kernel(
            [attention.SDPBackend.FLASH_ATTENTION, attention.SDPBackend.MATH],
            set_priority=True,
        ):
            self.do_test_op(
                "nn.functional.scaled_dot_product_attention",
                check_value=CheckValueMode.LOOSE,
                exclude_dtypes=(torch.int64,),
                check_grad=False,
            )

    def test_foreach_max(self):
        self.skipTest("_foreach_log2 is not ready yet: crashing on complex inputs.")

    def test_div(self):
        self.do_test_op("div", check_value=CheckValueMode.LOOSE)

    def test_clamp(self):
        self.do_test_op("clamp", skip_if=op_testing.some_filter, check_dynamism=False)
