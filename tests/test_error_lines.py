"""An error is one line whatever the name in it: a line break, a terminal escape or a bidi override from
the command line or from data is shown escaped (cli.common.one_line), never acted on (docs/data-safety.md)."""

import pytest
from conftest import opcov_here
from test_data_safety import one_line_error


@pytest.mark.parametrize(
    "argv,shown",
    [
        (("gaps", "tpu\ncpu"), "'tpu\\ncpu'"),
        (("ops", "F.relu", "-b", "x\r\x1b[31my"), "x\\r\\x1b[31my"),
        (("compare", "tpu", "evil\u202ename"), "evil\\u202ename"),
    ],
)
def test_a_name_with_a_line_break_or_an_escape_is_one_line_shown_escaped(argv, shown):
    """'opcov gaps' of a backend named 'tpu<newline>cpu' printed its error on two lines."""
    proc = opcov_here(*argv)
    one_line_error(proc, shown)
    assert "\x1b" not in proc.stderr and "\u202e" not in proc.stderr


def test_trace_on_nothing_is_refused_not_taken_for_no_on():
    """'opcov trace llama --on=' traced llama on the stand-in as if --on were not given."""
    one_line_error(opcov_here("trace", "llama", "--on="), "--on names the backend")


def test_diff_of_two_backend_names_says_what_diff_takes_and_points_to_compare():
    """'opcov diff tpu cuda' (two backends, as compare takes them) said "tpu: error: cannot read: No such file or
    directory"; a missing file among real ones names the file alone."""
    one_line_error(opcov_here("diff", "tpu", "cuda"), "to compare two backends: 'opcov compare tpu cuda'")
    proc = opcov_here("diff", "coverage/tpu/registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml", "coverage/tpu/x.yaml")
    one_line_error(proc, "coverage/tpu/x.yaml: no such file; diff compares two snapshot files")
    assert "compare" not in proc.stderr.replace("diff compares", "")
