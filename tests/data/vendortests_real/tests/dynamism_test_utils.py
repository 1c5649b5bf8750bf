# A fixture written for opcov's tests, in the shape of TorchTPU's tests/dynamism_test_utils.py: the
# bounded-dynamism filter returns a reason for each op it leaves out, from a named deny list, a list
# kept under another name, and lists written inline (one narrowed by a further condition). Not TorchTPU's code.


def verify_op_supports_dynamism(op_info, input_value, args):
    untriaged_ops_deny_list = [
        "masked_select",
        "torch.nn.functional.conv_transpose1d",
    ]
    op = op_info
    if op.name in untriaged_ops_deny_list:
        return f"Op {op.name} is not supported."
    require_mark_dynamic_support = ["addmm"]
    if op.name in require_mark_dynamic_support:
        return f"{op.name} op may work, but requires mark_dynamic test support."
    if op.name in ["min", "max"] and args:
        return "min/max with dim flips the result"
    return None


def mark_input_dynamic(seed, op_info, input_value, args):
    ternary_elementwise_ops = ["clamp", "where"]  # not a deny list: no reason is returned
    if op_info.name in ternary_elementwise_ops and args:
        return
