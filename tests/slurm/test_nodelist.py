"""Slurm node lists of every form, parsed where scontrol is missing (or refuses a form), and the rendezvous
port of two jobs sharing a node."""
import pytest

from benchcore.errors import UserError
from commbench.launch.slurm import MAX_HOSTS, expand_nodelist, rdzv_port

FORMS = {
    "n[0-3]": ["n0", "n1", "n2", "n3"],
    "gpu[001-004,007],cpu1": ["gpu001", "gpu002", "gpu003", "gpu004", "gpu007", "cpu1"],
    "rack1-n[01-02]-ib": ["rack1-n01-ib", "rack1-n02-ib"],  # Slurm 22.05's scontrol refuses this one
    "r[1-2]n[1-2]": ["r1n1", "r1n2", "r2n1", "r2n2"],
    "n[8-12]": ["n8", "n9", "n10", "n11", "n12"],
    "node7": ["node7"],
    "a,b[09-10]": ["a", "b09", "b10"],
}
BAD = {"n[3-1]": "runs backwards", "n[a-b]": "is not a Slurm node list", "n[1-2": "is not a Slurm node list",
       "": "is not a Slurm node list", "a,,b": "is not a Slurm node list", "n[1-2]]": "is not a Slurm node list",
       "n[0-99999999]": f"names more than {MAX_HOSTS} hosts", "\x1b[31mx": "is not a Slurm node list"}


@pytest.mark.parametrize("nodelist", FORMS)
def test_forms(nodelist):
    assert expand_nodelist(nodelist) == FORMS[nodelist]


@pytest.mark.parametrize("nodelist", BAD)
def test_bad_lists_one_line(nodelist):
    with pytest.raises(UserError) as e:
        expand_nodelist(nodelist)
    assert BAD[nodelist] in str(e.value) and "\n" not in str(e.value) and "\x1b" not in str(e.value)


def test_ports_of_jobs_sharing_a_node():
    assert rdzv_port(1234) != rdzv_port(2234)  # 29500 + id % 1000 gave both 29734
    assert {rdzv_port(j) for j in range(10_000)} <= set(range(29500, 32768))  # below the ephemeral range
