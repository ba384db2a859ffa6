"""Open MPI's evidence (commbench/evidence/mpi.py): the component lists and the judgement per variable. Real Open
MPI runs prove it end to end: tests/commbench/commands/test_sweep.py (a sweep of OMPI_MCA_btl, applied and not)."""
from commbench.evidence import mpi


def eff(pml="ob1", links=None, read=True):
    links = links if links is not None else {0: {0: "self", 1: "sm"}, 1: {1: "self", 0: "sm"}}
    return mpi.effective([{"pml": pml, "btl": links[r], "read": read} for r in sorted(links)])


def test_btl_lists_and_exclusions():
    assert eff()["btl"] == ["sm"] and eff()["links"] == {"0": {"1": "sm"}, "1": {"0": "sm"}}
    assert mpi.judge_btl(eff(), "self,sm")[0] == "applied"
    assert mpi.judge_btl(eff(), "^tcp")[0] == "applied"
    status, why = mpi.judge_btl(eff(), "self,tcp")
    assert status == "not applied" and "btl sm carried messages" in why and "rank 0 to 1: sm" in why
    assert mpi.judge_btl(eff(), "^sm")[0] == "not applied"


def test_pml_and_what_cannot_be_known():
    assert mpi.judge_pml(eff(), "ob1")[0] == "applied"
    assert mpi.judge_pml(eff(), "^ob1")[0] == "not applied"
    assert mpi.judge_btl(eff(pml="ucx"), "self,tcp")[0] == "not applied"   # no BTL carries anything under ucx
    assert mpi.judge_btl(eff(read=False), "self,tcp")[0] == "unknown"
    assert mpi.judge_btl(eff(links={0: {0: "self"}}), "self,tcp")[0] == "unknown"   # one rank: no peer
    assert mpi.judge_pml(eff(pml=None), "ob1")[0] == "unknown"
    assert mpi.judge_pml({"transport": "gloo"}, "ob1")[0] == "unknown"
