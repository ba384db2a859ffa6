"""MPI as a transport (issue 16): real mpirun, real mpi4py ranks, the same worker, cases and timed path."""
import json
import os
import subprocess
import sys
import time

import pytest

from benchcore.errors import UserError
from benchcore.processes import procs
from benchcore.results.diff import compare as compare_records
from commbench.cases.collectives import COLLECTIVES
from commbench.launch import mpirun
from commbench.plan import Plan
from tests.commbench.test_output import HEAD, table_heads
from tests.conftest import HOOKS_ON, assert_one_line_error, read_records, run_tool

ALL = ",".join(COLLECTIVES)


MPI_PLACES = {"all_reduce": "out in", "all_gather": "out in", "reduce_scatter": "out", "broadcast": "in",
              "reduce": "out in", "all_to_all": "out", "sendrecv": "out"}   # OSU measures reductions out of place


def mpi_rows(sizes):
    """(collective, size, in place) MPI measures: both placements of all_reduce, all_gather and reduce; no in-place
    reduce_scatter (MPI_IN_PLACE puts it elsewhere); one buffer in MPI_Bcast."""
    assert set(MPI_PLACES) == set(COLLECTIVES)
    return {(name, size, place == "in") for name, places in MPI_PLACES.items() for size in sizes
            for place in places.split()}


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_every_collective_exact_on_mpi_ranks(tmp_path, n):
    """Every collective, both placements where MPI has them, every reduction and root, three types: exact."""
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--backend", "mpi", "--collective", ALL, "--place", "both",
                    "--nproc-per-node", n, "-b", "3K", "-e", "48K", "-f", 16, "-n", 2, "-w", 1,
                    "-d", "float32,int32,float16", "-o", "sum,prod,max,min", "-r", "all", "--out", out)
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    assert {(r["collective"], r["size_bytes"], r["in_place"]) for r in recs} == mpi_rows([3072, 49152])
    assert {(r["dtype"], r["op"]) for r in recs if r["collective"] == "reduce"} == \
        {(d, o) for d in ("float32", "int32", "float16") for o in ("sum", "prod", "max", "min")}
    assert {r["root"] for r in recs if r["collective"] == "broadcast"} == set(range(n))
    for rec in recs:
        assert rec["wrong"] == 0 and rec["world_size"] == n and rec["backend"] == "mpi", rec
        assert rec["launcher"] == "mpirun" and rec["versions"]["mpi"].startswith("Open MPI")
        assert rec["versions"]["mpi4py"] and rec["versions"]["mpi_cuda_aware"] is False
        assert rec["time_us_min"] <= rec["time_us"] <= rec["time_us_max"]
    assert "running as root" in proc.stderr or "root" not in proc.stderr
    assert ("OVERSUBSCRIBE" in proc.stderr) == (n > 2)  # 2 cores here (CI too): 3 ranks need it, 2 do not
    heads = table_heads(proc.stdout)   # a table per collective and placement, each with Gloo's columns (issue 39)
    assert len(heads) == sum(len(p.split()) for p in MPI_PLACES.values()), proc.stdout
    assert all(words == HEAD for _, words in heads), proc.stdout


@pytest.mark.slow
def test_strategies_on_mpi_split_communicators_and_inflight(tmp_path):
    """ring, plain, chunked with 2 in flight, compressed, hierarchical across 2 emulated nodes: exact."""
    out = tmp_path / "s.jsonl"
    proc = run_tool("commbench", "compare", "--backend", "mpi", "--strategies",
                    "ring,rs-ag,plain,chunked,compressed,hierarchical", "--place", "out", "--nodes", 2,
                    "--nproc-per-node", 2, "-b", "1M", "-e", "1M", "--threshold", "256K", "--chunk-size", "128K",
                    "--inflight", 2, "-n", 2, "-w", 1, "--repeats", 1, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "2 nodes emulated" in proc.stderr
    recs = [r for r in read_records(out) if not r.get("event")]
    assert {(r["strategy"], r["phase"]) for r in recs} == {
        ("ring", "total"), ("plain", "total"), ("chunked", "total"), ("compressed", "total"),
        *(("rs-ag", p) for p in ("reduce_scatter", "all_gather", "total")),
        *(("hierarchical", p) for p in ("reduce_scatter", "all_reduce", "all_gather", "total"))}
    assert all(r["wrong"] == 0 and r["nodes"] == 2 and r["world_size"] == 4 for r in recs)
    chunked = next(r for r in recs if r["strategy"] == "chunked")
    assert chunked["chunks"] == 8 and chunked["max_inflight"] >= 1


@pytest.mark.slow
def test_compare_backends_side_by_side_and_diff_never_pools_them(tmp_path):
    """compare --backends gloo,mpi: both in one table with verdicts; diff and report --baseline join gloo with gloo
    only (they pooled both backends: 3 vs 6 values)."""
    out = tmp_path / "c.jsonl"
    proc = run_tool("commbench", "compare", "--backends", "gloo,mpi", "--strategies", "ring,plain", "-b", "1M",
                    "-e", "4M", "-f", 4, "-n", 3, "-w", 1, "--repeats", 2, "--out", out,
                    env={"COLUMNS": "200"})   # the header whole on one line (at 80 columns it wraps)
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    measured = [r for r in recs if not r.get("event")]
    assert {(r["backend"], r["strategy"], r["size_bytes"], r["repeat"]) for r in measured} == {
        (b, s, size, rep) for b in ("gloo", "mpi") for s in ("ring", "plain") for size in (1 << 20, 4 << 20)
        for rep in (0, 1)}
    assert all(r["wrong"] == 0 for r in measured) and len({r["run_id"] for r in recs}) == 1
    assert [r["backend"] for r in measured if r["repeat"] == 0][0] == "gloo"   # rounds rotate the first backend
    assert [r["backend"] for r in measured if r["repeat"] == 1][0] == "mpi"
    verdicts = [r for r in recs if r.get("event") == "verdict"]
    assert verdicts and all("[gloo]" in r["reason"] or "[mpi]" in r["reason"] for r in verdicts)
    assert "ring [gloo]" in proc.stdout and "plain [mpi]" in proc.stdout and "speed-up vs ring [gloo]" in proc.stdout
    sides = {}
    for backend in ("gloo", "mpi"):
        sides[backend] = tmp_path / f"{backend}.jsonl"
        sides[backend].write_text("".join(json.dumps(r) + "\n" for r in measured if r["backend"] == backend))
    lines, only_gloo, only_mpi = compare_records([r for r in measured if r["backend"] == "gloo"],
                                                 [r for r in measured if r["backend"] == "mpi"], 0.05)
    assert lines == [] and len(only_gloo) == len(only_mpi) == 4   # a join never pools transports
    diff = run_tool("commbench", "diff", sides["gloo"], sides["mpi"])
    assert diff.returncode == 2 and "Traceback" not in diff.stderr, diff.stderr     # nothing joined: nothing compared
    assert "the sides differ in backend (gloo vs mpi); launcher (local vs mpirun): such rows never join" in diff.stdout
    both = tmp_path / "both.jsonl"
    both.write_text("".join(json.dumps(r) + "\n" for r in measured))
    diff = run_tool("commbench", "diff", sides["gloo"], both)   # gloo against gloo + mpi: gloo's rows only
    assert diff.returncode == 0 and diff.stdout.startswith("4 rows joined: ")
    assert "only in new: ring total 1M float32 sum in-place 2 ranks (backend mpi" in diff.stdout
    report = run_tool("commbench", "report", both, "--baseline", sides["gloo"], "--out", tmp_path / "report")
    assert report.returncode == 0, report.stderr
    joined = [ln for ln in (tmp_path / "report" / "report.md").read_text().splitlines() if ln.startswith("| 1M |")]
    assert joined, report.stdout

@pytest.mark.slow
@pytest.mark.alone
def test_p2p_latency_and_bandwidth_on_both_transports(tmp_path):
    """One table, both transports; every record positive and checked, with the median and 99th percentile of its
    iterations (latency: beside the average in the table); bandwidth rises with size."""
    out = tmp_path / "p.jsonl"
    proc = run_tool("commbench", "p2p", "--mode", "latency,bw,bibw", "--backends", "gloo,mpi", "-b", "1K", "-e", "1M",
                    "-f", 32, "-n", 10, "-w", 2, "--window", 16, "--out", out,
                    env={"OMPI_MCA_mpi_yield_when_idle": "1",  # busy-polling ranks on a shared 2-core machine: erratic
                         "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    assert {(r["backend"], r["collective"], r["size_bytes"]) for r in recs} == {
        (b, f"p2p_{m}", s) for b in ("gloo", "mpi") for m in ("latency", "bw", "bibw") for s in (1024, 32768, 1 << 20)}
    for rec in recs:
        assert rec["wrong"] == 0 and rec["time_us"] > 0 and rec["busbw_gbps"] > 0 and rec["dtype"] == "uint8"
        assert rec["window"] == (1 if rec["collective"] == "p2p_latency" else 16)
        assert 0 < rec["time_us_p50"] <= rec["time_us_p99"]
        assert rec["env"].get("OMPI_MCA_mpi_yield_when_idle", "1") == "1"  # recorded where it applied (mpi)
    for backend in ("gloo", "mpi"):
        for mode in ("p2p_bw", "p2p_bibw"):
            bw = {r["size_bytes"]: r["busbw_gbps"] for r in recs if r["backend"] == backend and r["collective"] == mode}
            assert bw[1 << 20] > bw[1024] and max(bw[32768], bw[1 << 20]) > 3 * bw[1024], (backend, mode, bw)
    for word in ("latency", "bw", "bibw", "MB/s", "gloo", "mpi"):   # headers are wrapped to their columns' width
        assert word in proc.stdout
    assert proc.stdout.count("p50") >= 3 and proc.stdout.count("p99") >= 3   # the title's, a column per transport
    # the docs' example (2 transports, 3 modes: 12 columns) within 100 columns in a pipe (issue 49 item 7)
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100, proc.stdout


@pytest.mark.slow
def test_a_rank_dying_ends_the_run_naming_it(tmp_path):
    proc = run_tool("commbench", "run", "--backend", "mpi", "-b", "8K", "-e", "8K", "-n", 2,
                    env={**HOOKS_ON, "COMMBENCH_TEST_EXIT_RANK": "1"}, timeout=120)   # a hang: past the timeout
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "error: rank 1 on" in proc.stderr and "exited with code 17" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, env, needle", [
    (["run", "--backend", "mpi"], {"COMMBENCH_MPIRUN": "/nonexistent/mpirun"}, "--backend mpi needs mpirun"),
    (["run", "--backend", "mpi", "--launcher", "torchrun"], {}, "use --launcher mpirun or slurm"),
    (["run", "--backend", "gloo", "--launcher", "mpirun"], {}, "use --backend mpi"),
    (["run", "--backend", "mpi", "-d", "bfloat16"], {}, "MPI has no bfloat16 reduction"),
    (["run", "--backend", "mpi", "--collective", "reduce_scatter", "--place", "in"], {},
     "reduce_scatter has no in-place variant in MPI"),
    (["compare", "--backends", "gloo"], {}, "--backends takes two or more"),
    (["compare", "--backends", "gloo,mpi", "--backend", "gloo"], {}, "exclude each other"),
    (["p2p", "--nproc-per-node", 3], {}, "exactly 2 ranks"),
    (["p2p", "--mode", "pingpong"], {}, "--mode takes latency, bw, bibw"),
])
def test_bad_input_is_one_line(args, env, needle):
    assert_one_line_error(run_tool("commbench", *args, env=env, timeout=60), needle)  # refused before a launch


def test_mpi4py_missing_names_the_fix():
    with pytest.raises(UserError, match="needs mpi4py, which /usr/bin/python3 lacks: pip install"):
        mpirun.mpi4py_library("/usr/bin/python3")  # Debian's python: a real interpreter without mpi4py


def test_mpirun_and_library_versions_agree_by_family_and_open_mpi_major():
    assert (mpirun.vendor_of("mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/")
            == ("Open MPI", (5, 0, 11)))
    assert mpirun.vendor_of("HYDRA build details:\n    Version:          4.1.2") == ("MPICH", (4, 1, 2))
    assert mpirun._agrees(("Open MPI", (5, 0, 11)), ("Open MPI", (5, 0, 3)))
    assert not mpirun._agrees(("Open MPI", (4, 1, 4)), ("Open MPI", (5, 0, 11)))
    assert not mpirun._agrees(("MPICH", (4, 1)), ("Open MPI", (5, 0, 11)))


def test_dry_run_prints_mpirun_with_what_this_machine_needs():
    proc = run_tool("commbench", "run", "--backend", "mpi", "--nproc-per-node", 3, "--dry-run", "-e", "1K")
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert " -n 3 " in line and "commbench.worker --plan" in line and "-x PYTHONUNBUFFERED" in line
    assert "OVERSUBSCRIBE" in line and "OMPI_ALLOW_RUN_AS_ROOT=1" in line  # root, 2 cores
    assert "3 ranks on 2 cores" in proc.stderr and "running as root" in proc.stderr
    assert "OMP_NUM_THREADS=1" in line and "-x OMP_NUM_THREADS" in line   # as torchrun sets it
    mine = run_tool("commbench", "run", "--backend", "mpi", "--nproc-per-node", 3, "--dry-run", "-e", "1K",
                    env={"OMP_NUM_THREADS": "2"})
    assert "OMP_NUM_THREADS=1" not in mine.stdout and "-x OMP_NUM_THREADS" not in mine.stdout   # the user's stays


def test_rank_variables_from_mpirun_and_srun():
    ompi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2", mpirun.RANKS_PER_NODE_ENV: "2"}
    assert mpirun.rank_env(ompi) == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                                  "GROUP_RANK": "1", "COMMBENCH_RECORD_NODE": "0"}
    slurm = mpirun.rank_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"})
    assert slurm["RANK"] == "0" and slurm["GROUP_RANK"] == "0" and slurm["COMMBENCH_RECORD_NODE"] == "1"


def test_dead_ranks_from_mpirun_text():
    ranks = {1: {"rank": 1, "pid": 23357, "host": "vm"}}
    killed = ["prterun noticed that process rank 1 with PID 23357 on node vm exited on", "signal 9 (Killed)."]
    assert mpirun.dead_ranks(killed, ranks) == [
        "rank 1 on vm (pid 23357) was killed by SIGKILL; mpirun ended every rank"]
    exited = ["The first process to do so was:", "", "   Process name: [prterun-vm-23006@1,1]", "   Exit code:    17"]
    assert mpirun.dead_ranks(exited, ranks) == [
        "rank 1 on vm (pid 23357) exited with code 17 before the end of the run; mpirun ended every rank"]


def test_the_cli_imports_neither_torch_nor_mpi4py():
    code = "import sys, commbench.commands.cli; sys.exit(1 if {'torch', 'mpi4py'} & set(sys.modules) else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_slurm_dry_run_is_one_mpirun_placing_ranks_per_node():
    """Inside an allocation mpirun, not srun, starts the ranks (srun --mpi=pmix cannot load the wheel's PMIx; run for
    real in tests/slurm/test_slurm.py)."""
    proc = run_tool("commbench", "run", "--backend", "mpi", "--launcher", "slurm", "--nodes", 2, "--nproc-per-node", 4,
                    "--dry-run", "-e", "1K")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "mpirun -n" in ln)   # after sbcast of the plan file
    assert "mpirun -n 8 " in line and "--map-by ppr:4:node" in line and "commbench.worker --plan" in line
    assert "COMMBENCH_RANKS_PER_NODE=4" in line and "srun" not in line and "benchcore.processes.torchrun" not in line


@pytest.mark.slow
def test_ranks_of_another_mpis_launcher_are_told_in_one_line(tmp_path):
    """A Hydra-style launcher (PMI_SIZE=2) whose MPI is not mpi4py's: each rank initialises alone; it says so."""
    plan = Plan(run_id="x", sizes=[8], configs=[{"case": "all_reduce", "in_place": True, "dtype": "float32",
                                                  "op": "sum", "root": None}], backend="mpi")
    plan.write(tmp_path / "plan.json")
    proc = subprocess.run([sys.executable, "-m", "commbench.worker", "--plan-file", tmp_path / "plan.json"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PMI_SIZE": "2", "PMI_RANK": "0"})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0].startswith("commbench-worker: rank 0 on ")
    assert "mpi4py sees 1 rank(s) but the launcher started 2" in proc.stderr.splitlines()[0]


def _descends_from(pid, ancestor):
    while pid > 1:
        if pid == ancestor:
            return True
        st = procs.proc_stat(pid)
        if st is None:
            return False
        pid = st.ppid
    return False


def _mpi_rank_pid(rank, ancestor, timeout=60):
    """The pid of the commbench worker that ancestor's mpirun started as `rank` (from its environment): another
    test's MPI run may be on the machine at the same time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in procs.pids():
            if "commbench.worker" not in (procs.proc_cmdline(pid) or []) or not _descends_from(pid, ancestor):
                continue
            try:
                environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no MPI rank {rank} after {timeout} s")


@pytest.mark.slow
def test_a_rank_killed_mid_run_is_named_and_the_records_before_are_kept(tmp_path):
    out = tmp_path / "k.jsonl"
    run = procs.spawn([sys.executable, "-m", "commbench.commands.cli", "run", "--backend", "mpi", "-b", "64K",
                       "-e", "64M", "-f", 4, "-n", 2000, "-w", 1, "--out", out], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 1):
            time.sleep(0.1)
        victim = _mpi_rank_pid(1, run.pid)
        os.kill(victim, 9)
        _, err = run.communicate(timeout=60)   # a hang: past the timeout
    finally:
        procs.stop(run, grace=0)
    assert run.returncode != 0 and "Traceback" not in err
    assert "error: rank 1 on " in err and f"(pid {victim}) was killed by SIGKILL" in err, err
    recs = read_records(out)
    assert 1 <= len(recs) < 6 and all(r["wrong"] == 0 and r["backend"] == "mpi" for r in recs)
