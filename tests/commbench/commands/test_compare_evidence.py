"""compare decides on evidence (issue 47 item 4): a backend whose requested setting did not take effect is shown but
never ranked. Real launches: Gloo, and Open MPI whose own command line (`--mca btl self,sm`, as a site's wrapper would
pass it) outranks the shell's OMPI_MCA_btl=self,tcp."""
import pytest

from tests.conftest import read_records, run_tool


@pytest.mark.slow
def test_compare_never_ranks_a_backend_whose_setting_did_not_apply(tmp_path):
    out = tmp_path / "c.jsonl"
    proc = run_tool("commbench", "compare", "--backends", "gloo,mpi", "--strategies", "ring,plain", "--place", "out",
                    "--nproc-per-node", 2, "-b", "64K", "-e", "64K", "-n", 3, "-w", 1, "--repeats", 1, "--out", out,
                    cwd=tmp_path, env={"COMMBENCH_MPIRUN_ARGS": "--mca btl self,sm", "OMPI_MCA_btl": "self,tcp",
                                       "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    mpi = [r for r in recs if r.get("backend") == "mpi"]
    assert mpi and all(r["applied"]["OMPI_MCA_btl"]["status"] == "not applied" for r in mpi)
    assert all(r["applied"] == {"GLOO_SOCKET_IFNAME": {"status": "applied", "evidence": r["applied"][
        "GLOO_SOCKET_IFNAME"]["evidence"]}} for r in recs if r.get("backend") == "gloo")   # OMPI_MCA_btl: not Gloo's
    [found] = [r for r in recs if r.get("event") == "verdict"]
    named = set(found.get("tied") or [found["winner"], found["versus"]])
    assert named == {"ring [gloo]", "plain out-of-place [gloo]"}, found
    for label in ("ring [mpi]", "plain out-of-place [mpi]"):
        assert f"not applied: {label}: OMPI_MCA_btl: btl sm carried messages between ranks" in proc.stdout
    assert proc.stdout.count("not ranked: not applied") == 2, proc.stdout
