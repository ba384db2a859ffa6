"""commbench sweep: one real launch per config, failures recorded, resume after a kill."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from commbench.cases import faults
from commbench.commands.sweep import build_configs
from commbench.health import boundary
from commbench.transports.envvars import CATALOGUE
from tests.conftest import BIN, HOOKS_ON, assert_one_line_error, read_records, run_tool

SMALL = ["--nproc-per-node", 2, "-b", "4K", "-e", "4K", "-n", 2, "-w", 1]


def configs_done(recs):
    return [r["sweep_config"] for r in recs if r.get("event") == "config_done"]


@pytest.mark.slow
def test_two_by_two_matrix_on_gloo_is_one_launch_standing_for_five(tmp_path):
    """NCCL_* change nothing on Gloo: the five configs run the same operations, so one is measured for them all
    (issue 49 item 6: it ran 9 launches to conclude 'nothing to rank'), said once with the launches saved, and the
    verdict names the group in words."""
    out = tmp_path / "sweep.jsonl"
    proc = run_tool("commbench", "sweep", "--env", "NCCL_ALGO=Ring,Tree", "--env", "NCCL_PROTO=LL,Simple",
                    *SMALL, "--repeats", 2, "--out", out, env={"NCCL_ALGO": "Tree"})  # no shell value in baseline
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("note: NCCL_ALGO, NCCL_PROTO are not read by gloo, which this sweep runs on: 5 configs "
                             "run the same operations; each set is launched once: 2 launches (1 config x 2 rounds) "
                             "instead of 10 (8 saved)") == 1, proc.stderr
    recs = read_records(out)
    (found,) = [r for r in recs if r.get("event") == "verdict"]
    assert found["winner"] is None and len(found["equivalent"]) == 1 and len(found["equivalent"][0]) == 5
    assert "nothing to rank" in proc.stdout
    measured = [r for r in recs if not r.get("event")]
    assert len({r["run_id"] for r in measured}) == 2 and configs_done(recs) == ["baseline"] * 2   # 2 rounds
    for rec in measured:   # the baseline: none of the swept variables set, not even the shell's
        assert not {k for k in rec["env"] if k in ("NCCL_ALGO", "NCCL_PROTO")} and rec["wrong"] == 0
    assert "baseline, also standing for NCCL_ALGO=Ring NCCL_PROTO=LL, " in " ".join(found["reason"].split())
    assert "sweep ranking" in proc.stdout and "also standing for" in " ".join(proc.stdout.split())


@pytest.mark.slow
def test_failing_config_is_recorded_and_the_rest_complete(tmp_path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("configs:\n  - {COMMBENCH_TEST_EXIT_RANK: 1}\n")
    out = tmp_path / "sweep.jsonl"
    proc = run_tool("commbench", "sweep", "--matrix", matrix, *SMALL, "--repeats", 1, "--out", out, "--timeout", 30,
                    env=HOOKS_ON)
    assert proc.returncode == 1 and "1 of 2 configs failed" in proc.stderr
    recs = read_records(out)
    failed = [r for r in recs if r.get("event") == "failed"]
    assert [r["sweep_config"] for r in failed] == ["COMMBENCH_TEST_EXIT_RANK=1"]
    assert failed[0]["reason"].startswith("crash")
    assert configs_done(recs) == ["baseline"]


@pytest.mark.slow
def test_resume_after_a_sweep_killed_mid_config_reruns_it_and_ranks_no_partial_records(tmp_path):
    """Killed while a config is half measured: resume reruns that (config, round) whole, says what it left
    out, and nothing of the cut run is ranked or printed."""
    out = tmp_path / "sweep.jsonl"
    args = [str(BIN / "commbench"), "sweep", "--env", "GLOO_SOCKET_IFNAME=lo", "--nproc-per-node", "2", "-b", "4K",
            "-e", "4M", "-f", "4", "-n", "3", "-w", "1", "--repeats", "2", "--out", str(out), "--resume"]
    sweep = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # its log dir lands in
                             env={**os.environ, "TMPDIR": str(tmp_path)})                 # tmp_path: it is killed

    def cut_runs(recs):
        ended = {r["run_id"] for r in recs if r.get("event")}
        return {r["run_id"] for r in recs if not r.get("event") and r["run_id"] not in ended}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        recs = read_records(out)
        if configs_done(recs) and cut_runs(recs):
            break
        time.sleep(0.05)
    sweep.send_signal(signal.SIGKILL)  # no clean-up: the agents must die with it (PR_SET_PDEATHSIG)
    sweep.wait()
    before = read_records(out)
    cut = cut_runs(before)
    done_before = len(configs_done(before))
    assert len(cut) == 1 and 1 <= done_before < 4
    time.sleep(1)
    proc = run_tool("commbench", *args[1:], "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert f"resuming: {done_before} of 4 config runs (2 configs x 2 rounds) done, {4 - done_before} to run" \
        in proc.stderr and "left out" in proc.stderr and "run(s) cut short" in proc.stderr
    after = read_records(out)
    assert after[:len(before)] == before  # nothing measured before the kill is lost
    done = [(r["sweep_config"], r["repeat"]) for r in after if r.get("event") == "config_done"]
    assert sorted(done) == sorted((c, k) for c in ("baseline", "GLOO_SOCKET_IFNAME=lo") for k in (0, 1))
    printed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert printed and not {r["run_id"] for r in printed} & cut
    assert [r for r in printed if r.get("event") == "verdict"]


def test_nccl_syntax_is_accepted_and_checked():
    """^ exclusions, per-collective lists and quoted values with commas (NCCL 2.24+ syntax), in a dry run on NCCL
    (on Gloo, which reads none of them, the configs are one launch and the dry run shows that one)."""
    proc = run_tool("commbench", "sweep", "--env", 'NCCL_PROTO=^LL128,"LL,Simple"',
                    "--env", "NCCL_ALGO=allreduce:tree;ring", "--dry-run", "--backend", "nccl", *SMALL)
    assert proc.returncode == 0, proc.stderr
    # as a shell runs them
    for shown in ("NCCL_PROTO='^LL128'", "NCCL_PROTO=LL,Simple", "NCCL_ALGO='allreduce:tree;ring'"):
        assert shown in proc.stdout
    for bad, needle in (("NCCL_ALGO=allreduc:tree", "names no NCCL collective"),
                        ("NCCL_PROTO=^LL129", "must be a list of LL, LL128, Simple")):
        assert_one_line_error(run_tool("commbench", "sweep", "--env", bad, "--dry-run", *SMALL), needle)


def test_matrix_product_exclusions_and_explicit_configs(tmp_path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("env:\n  NCCL_ALGO: [Ring, Tree]\n  NCCL_PROTO: [LL, Simple]\n"
                      "exclude:\n  - {NCCL_ALGO: Tree, NCCL_PROTO: LL}\n"
                      "configs:\n  - {NCCL_MAX_NCHANNELS: 4}\n")
    configs = build_configs([], str(matrix), False)
    assert configs == [{}, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"},
                       {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}, {"NCCL_MAX_NCHANNELS": "4"}]


@pytest.mark.parametrize("args, needle", [
    (["--env", "NCCL_ALOG=Ring"], "did you mean NCCL_ALGO?"),
    (["--env", "NCCL_PROTO=LL,Fast"], "NCCL_PROTO=Fast: must be a list of LL, LL128, Simple"),
    (["--env", "NCCL_MAX_NCHANNELS=100"], "must be in 1..64"),
    (["--env", "GLOO_SOCKET_IFNAM=eth0"], "did you mean GLOO_SOCKET_IFNAME?"),
    (["--env", "NCCL_IB_SLL=1"], "did you mean NCCL_IB_SL?"),   # the whole catalogue, not a near miss
    (["--env", "NCCL_IB_SL=16"], "NCCL_IB_SL=16: must be in 0..15"),
    (["--env", "NCCL_ALGO"], "is not NAME=VALUE"),
    ([], "nothing to sweep"),
    (["--matrix", "/nonexistent.yaml"], "no such file"),
])
def test_typos_and_bad_values_are_refused(args, needle):
    assert_one_line_error(run_tool("commbench", "sweep", *args, timeout=60), needle)


def test_allow_unknown_lets_experts_pass_anything():
    proc = run_tool("commbench", "sweep", "--env", "NCCL_FUTURE_KNOB=7", "--allow-unknown", "--dry-run", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "NCCL_FUTURE_KNOB=7" in proc.stdout


def test_sweep_says_once_that_its_nodes_are_emulated():
    """--nodes 2 without an endpoint, allocation or host list: said once on stderr, as run and compare say it (sweep
    said nothing)."""
    proc = run_tool("commbench", "sweep", "--env", "NCCL_PROTO=LL,Simple", "--nodes", 2, "--nproc-per-node", 1,
                    "-b", "1K", "-e", "1K", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("note: --nodes 2 without --rdzv-endpoint, a Slurm allocation or --hosts: both nodes are "
                             "emulated on this host") == 1, proc.stderr


def test_env_lists_the_catalogue():
    proc = run_tool("commbench", "env", env={"COLUMNS": "300"})   # headers unwrapped ("read by" over "nccl")
    assert proc.returncode == 0
    for name in ("NCCL_ALGO", "NCCL_IB_QPS_PER_CONNECTION", "TORCH_NCCL_BLOCKING_WAIT", "GLOO_SOCKET_IFNAME",
                 "NCCL_IB_SL"):
        assert name in proc.stdout
    assert "read by" in proc.stdout


def test_env_lists_no_test_hook_and_faults_documents_each_one_the_code_reads(tmp_path):
    """`commbench env` lists none of the COMMBENCH_TEST_* hooks (it listed all six, as variables a user may set);
    faults.py's docstring (a case's faults) or health/boundary.py's (the hardware's) names each one the code reads; without the tests' switch --env and a matrix refuse one."""
    root = Path(__file__).resolve().parents[3] / "commbench"
    hooks = {m for p in root.rglob("*.py") for m in re.findall(r"COMMBENCH_TEST_[A-Z_]+", p.read_text())}
    listed = run_tool("commbench", "env").stdout
    assert len(hooks) >= 6 and "COMMBENCH_" not in listed
    # piped, the README's 100 columns (it was 735 wide): values and meanings wrap, every name stays whole
    assert max(len(line) for line in listed.splitlines()) <= 100, listed
    assert all(f" {name} " in listed for name in CATALOGUE), listed
    assert {h for h in hooks if h not in faults.__doc__ + boundary.__doc__} == set()   # a case's or the hardware's
    matrix = tmp_path / "m.yaml"
    matrix.write_text("configs:\n  - {COMMBENCH_TEST_EXIT_RANK: 1}\n")
    for args in (["--env", "COMMBENCH_TEST_STALL=1:1", "--allow-unknown"], ["--matrix", matrix]):
        assert_one_line_error(run_tool("commbench", "sweep", *args, *SMALL, "--dry-run", timeout=60),
                              "is a test hook of commbench's own tests: refused")




@pytest.mark.slow
def test_sigterm_ends_the_sweep_at_once_and_resume_runs_the_interrupted_run_again(tmp_path):
    """SIGTERM (again and again, as Slurm may send it) while a config runs: the sweep stops there, the run it cut is
    marked interrupted (it was 'failed ... crash: terminated by SIGTERM', the sweep ran on, exited 1 and --resume
    never ran that config again), the ranking and the plot of the runs that completed are written, exit 143; then
    --resume runs the interrupted run whole and the rest."""
    out, plot = tmp_path / "sweep.jsonl", tmp_path / "sweep.png"
    args = [str(BIN / "commbench"), "sweep", "--env", "GLOO_SOCKET_IFNAME=lo", "--nproc-per-node", "2", "-b", "4K",
            "-e", "4M", "-f", "4", "-n", "3", "-w", "1", "--repeats", "2", "--out", str(out), "--resume"]
    env = {**os.environ, **HOOKS_ON, "COMMBENCH_TEST_SLOW": "all_reduce:0.05", "TMPDIR": str(tmp_path)}
    sweep = subprocess.Popen(args + ["--plot", str(plot)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            recs = read_records(out) if out.exists() else []
            if configs_done(recs) and not recs[-1].get("event"):   # one config run done, the next one measuring
                break
            time.sleep(0.05)
        while sweep.poll() is None:
            sweep.send_signal(signal.SIGTERM)
            time.sleep(0.05)
        stdout, stderr = sweep.communicate()
    finally:
        sweep.kill()
    assert sweep.returncode == 143 and "Traceback" not in stderr, stderr
    recs = read_records(out)
    (stopped,) = [r for r in recs if r.get("event") == "interrupted"]
    assert stopped["reason"].startswith("terminated by SIGTERM (a time limit, scancel or kill) after")
    assert [r for r in recs if r.get("event") == "failed"] == []
    ended = {r["run_id"] for r in recs if r.get("event") in ("config_done", "interrupted")}
    assert {r["run_id"] for r in recs if not r.get("event")} <= ended   # no run started after the interrupted one
    done = len(configs_done(recs))
    assert len(ended) == done + 1 and 1 <= done < 4
    # rounds counted from 1 as the progress says them (the record's repeat from 0)
    assert f"error: {stopped['sweep_config']} (round {stopped['repeat'] + 1}): terminated by SIGTERM" in stderr
    assert f"--resume with the same options and --out runs the {4 - done} config runs not done" in stderr
    assert "sweep ranking" in stdout and plot.stat().st_size > 0
    proc = run_tool("commbench", *args[1:], "--format", "json",
                    env={**HOOKS_ON, "COMMBENCH_TEST_SLOW": "all_reduce:0.05"})
    assert proc.returncode == 0, proc.stderr
    assert f"resuming: {done} of 4 config runs (2 configs x 2 rounds) done, {4 - done} to run" in proc.stderr
    after = read_records(out)
    assert after[:len(recs)] == recs
    assert sorted((r["sweep_config"], r["repeat"]) for r in after if r.get("event") == "config_done") == \
        sorted((c, k) for c in ("baseline", "GLOO_SOCKET_IFNAME=lo") for k in (0, 1))
    printed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert printed and stopped["run_id"] not in {r["run_id"] for r in printed}


MATRIX = "baseline: false\nconfigs:\n  - {NCCL_PROTO: LL}\n"   # one config: one launch
BASES = {"collective": ["--collective", "reduce", "-b", "4K", "-e", "16K", "-f", "4"],
         "strategy": ["--strategy", "chunked", "-b", "4K", "-e", "4K"]}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """{base: its sweep's arguments}: one real sweep of a collective and one of a strategy, done; resumed with the same
    measured options (a longer --timeout changes nothing measured), each has nothing left to run."""
    tmp = tmp_path_factory.mktemp("resume")
    (tmp / "m.yaml").write_text(MATRIX)
    done = {}
    for base, what in BASES.items():
        args = ["sweep", "--matrix", tmp / "m.yaml", *what, "--nproc-per-node", 2, "-n", 2, "-w", 1, "--repeats", 1,
                "--out", tmp / f"{base}.jsonl"]
        proc = run_tool("commbench", *args)
        assert proc.returncode == 0, proc.stderr
        proc = run_tool("commbench", *args, "--timeout", 100, "--resume")
        assert proc.returncode == 0 and "1 of 1 config runs (1 configs x 1 rounds) done, 0 to run" in proc.stderr, \
            proc.stderr
        done[base] = args
    return done


@pytest.mark.slow
@pytest.mark.parametrize("base, given, differs", [
    ("collective", ["--agg", "max", "--no-blocking"], "-a/--agg avg there, max here; --blocking/-z default there, "
                                                      "no here"),
    ("collective", ["-b", "8K"], "-b/-e/-f 4K,16K there, 8K here"),
    ("collective", ["-e", "64K"], "-b/-e/-f 4K,16K there, 4K,16K,64K here"),
    ("collective", ["-f", "2"], "-b/-e/-f 4K,16K there, 4K,8K,16K here"),
    ("collective", ["-n", "3"], "-n/--iters 2 there, 3 here"),
    ("collective", ["-w", "2"], "-w/--warmup 1 there, 2 here"),
    ("collective", ["-m", "2"], "-m/--agg-iters 1 there, 2 here"),
    ("collective", ["-N", "2"], "-N/--cycles 1 there, 2 here"),
    ("collective", ["-d", "int32"], "-d/--dtype float32 there, int32 here"),
    ("collective", ["-o", "max"], "-o/--op sum there, max here"),
    ("collective", ["-r", "1"], "-r/--root 0 there, 1 here"),
    ("collective", ["--nproc-per-node", "3"], "--nproc-per-node 2 there, 3 here"),
    ("strategy", ["--chunk-size", "1M"], "--chunk-size 2M there, 1M here"),
    ("strategy", ["--threshold", "8M"], "--threshold 16M there, 8M here"),
    ("strategy", ["--inflight", "2"], "--inflight 1 there, 2 here"),
    ("strategy", ["--place", "out"], "--place in,out there, out here"),
])
def test_resume_refuses_records_measured_with_other_options(swept, base, given, differs):
    """A sweep resumed with an option that changes what is measured reused the records (--agg max --no-blocking
    over a default run said '4 of 4 done'); it is refused in one line naming the option, before anything runs."""
    proc = run_tool("commbench", *swept[base], *given, "--resume", "--dry-run")
    assert_one_line_error(proc, f"--resume: {swept[base][-1]} holds a sweep measured with other options ({differs}): "
                                "the same options resume it; another --out starts a new sweep")


def test_a_sweep_on_mpi_says_mpi_reads_no_nccl_variable():
    """--backend mpi: the warning said 'not read by gloo'; a variable of no known prefix (Open MPI's) may be read."""
    proc = run_tool("commbench", "sweep", "--env", "NCCL_ALGO=Ring,Tree", "--env", "OMPI_MCA_btl_tcp_links=1,2",
                    "--allow-unknown", "--backend", "mpi", "--dry-run", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "note: NCCL_ALGO is not read by mpi, which this sweep runs on: 4 configs run the same operations; each " \
        "set is launched once: 9 launches (3 configs x 3 rounds) instead of 15 (6 saved)" in proc.stderr   # the \
    # OMPI_MCA_* values tell the others apart


MPI_BTL = {"baseline": False, "configs": [{"OMPI_MCA_btl": "self,tcp"}, {"OMPI_MCA_btl": "self,sm"}]}


def mpi_sweep(tmp_path, name, matrix, mpirun_args=""):
    """A sweep on 2 real Open MPI ranks (one launch per config, one round); (exit status, stdout, records)."""
    path, out = tmp_path / f"{name}.yaml", tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(matrix))
    proc = run_tool("commbench", "sweep", "--backend", "mpi", "--matrix", path, "--allow-unknown", "--repeats", 1,
                    "--place", "out", *SMALL, "--out", out, "--format", "table", cwd=tmp_path,
                    env={"COMMBENCH_MPIRUN_ARGS": mpirun_args, "COLUMNS": "200"})
    return proc, read_records(out)


def settings_of(recs):
    return {r["sweep_config"]: r["applied"] for r in recs if not r.get("event") and "applied" in r}


@pytest.mark.slow
def test_a_btl_sweep_proves_tcp_was_forced_over_shared_memory(tmp_path):
    """OMPI_MCA_btl=self,tcp between two ranks of one host: Open MPI's own selection output says tcp carried every
    message (sm does otherwise): both configs applied, both ranked."""
    proc, recs = mpi_sweep(tmp_path, "btl", MPI_BTL)
    assert proc.returncode == 0, proc.stderr
    measured = [r for r in recs if not r.get("event")]
    assert {r["sweep_config"]: r["effective"]["btl"] for r in measured} == {
        "OMPI_MCA_btl=self,tcp": ["tcp"], "OMPI_MCA_btl=self,sm": ["sm"]}
    assert all(r["effective"]["pml"] == "ob1" and r["effective"]["links"] == {"0": {"1": r["effective"]["btl"][0]},
                                                                              "1": {"0": r["effective"]["btl"][0]}}
               for r in measured)
    assert {k: v["OMPI_MCA_btl"]["status"] for k, v in settings_of(recs).items()} == {
        "OMPI_MCA_btl=self,tcp": "applied", "OMPI_MCA_btl=self,sm": "applied"}
    assert re.search(r"OMPI_MCA_btl=self,tcp +│ OMPI_MCA_btl +│ applied +│ only btl tcp carried messages", proc.stdout)
    [found] = [r for r in recs if r.get("event") == "verdict"]
    assert set(found["tied"] or [found["winner"], found["versus"]]) == {"OMPI_MCA_btl=self,tcp", "OMPI_MCA_btl=self,sm"}
    assert "not applied" not in proc.stdout and "warning" not in proc.stderr


@pytest.mark.slow
def test_a_btl_that_mpirun_overrides_is_not_ranked_and_an_unproven_one_is_marked(tmp_path):
    """A setting made ineffective for real: mpirun's own `--mca btl self,sm` (COMMBENCH_MPIRUN_ARGS, as a site's
    wrapper would pass it) outranks the environment's OMPI_MCA_btl=self,tcp, and Open MPI's selection shows sm carried
    the messages: that config is reported not applied, with the evidence, and never ranked. A variable no row proves
    (OMPI_MCA_mpi_yield_when_idle) is ranked, marked (unproven)."""
    matrix = {**MPI_BTL, "configs": MPI_BTL["configs"] + [{"OMPI_MCA_mpi_yield_when_idle": "1"}]}
    proc, recs = mpi_sweep(tmp_path, "over", matrix, "--mca btl self,sm")
    assert proc.returncode == 0, proc.stderr
    tcp = "OMPI_MCA_btl=self,tcp"
    assert {r["effective"]["btl"][0] for r in recs if not r.get("event")} == {"sm"}
    [dropped] = [r for r in recs if r.get("event") == "not_applied"]
    assert dropped["sweep_config"] == tcp and dropped["applied"]["OMPI_MCA_btl"]["status"] == "not applied"
    assert dropped["reason"].startswith(f"{tcp}: OMPI_MCA_btl: btl sm carried messages between ranks (rank 0 to 1: sm")
    [found] = [r for r in recs if r.get("event") == "verdict"]
    named = set(found["tied"] or [found["winner"], found["versus"]])
    assert named == {"OMPI_MCA_btl=self,sm", "OMPI_MCA_mpi_yield_when_idle=1 (unproven)"}, found
    assert f"not applied: {tcp}: OMPI_MCA_btl: btl sm carried messages" in proc.stdout
    assert re.search(rf"{tcp} +│ OMPI_MCA_btl +│ not applied +│ btl sm carried", proc.stdout)
    assert "unknown: OMPI_MCA_mpi_yield_when_idle=1 (unproven): OMPI_MCA_mpi_yield_when_idle: no evidence row" \
        in proc.stdout
    assert "warning: 1 of 3 configs ran without their setting (not applied: not ranked)" in proc.stderr
