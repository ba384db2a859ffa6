"""Why a launch failed, from the agents' logs (commbench/launch/failure.py)."""
import io

from commbench.launch.failure import reasons


def test_two_ranks_writing_one_line_give_one_reason_each_said_once():
    """Both ranks of a too-small --time-budget say the same line at once; the log held them run together
    ('...configs)commbench-worker: ...commbench-worker: ...'), and the error showed the text twice on one line."""
    line = "--time-budget 100 s is too small: the start-up took 40 s"
    log = io.StringIO(f"[rank0]: note (2 configs)commbench-worker: {line}commbench-worker: {line}\n"
                      f"commbench-worker: {line}\n")
    assert reasons([log], spec=None) == [line]
