"""Every NCCL launch collects NCCL's evidence: the launch's environment (no NCCL here: the function the Supervisor
calls, for an NCCL and a Gloo spec), and rank 0's reading of its node's per-rank logs into records (real captured
logs written as NCCL writes them, through the Context method that makes each record's fields)."""
import os
from pathlib import Path
from types import SimpleNamespace

from commbench.context import Context
from commbench.evidence import nccl
from commbench.launch.execute import launch_env
from commbench.launch.spec import LaunchSpec

LOGS = Path(__file__).parents[2] / "fixtures" / "nccl_info"


def spec(backend):
    return LaunchSpec(nodes=1, nproc_per_node=2, launcher="local", rdzv_endpoint=None, node_rank=0, backend=backend,
                      timeout=60, rdzv_timeout=60, dry_run=False, verbose=False)


def test_debug_output_per_rank_into_the_launch_directory_only_for_nccl(tmp_path):
    env = launch_env(spec("nccl"), {"PATH": "/bin"}, tmp_path)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,TUNING,GRAPH,NET"
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl.%h.%p")
    assert nccl.partial(env) is None
    for backend in ("gloo", "mpi"):
        assert launch_env(spec(backend), {"PATH": "/bin"}, tmp_path) == {"PATH": "/bin"}
    mine = launch_env(spec("nccl"), {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "INIT"}, tmp_path)
    assert mine["NCCL_DEBUG"] == "WARN" and mine["NCCL_DEBUG_SUBSYS"] == "INIT"     # the user's own, kept
    assert "no INFO line" in nccl.partial(mine)
    assert "lacks ENV,TUNING,NET" in nccl.partial({**mine, "NCCL_DEBUG": "INFO"})


def test_rank_zero_follows_its_nodes_logs_into_each_record(tmp_path):
    environ = launch_env(spec("nccl"), {}, tmp_path)
    text = (LOGS / "nccl-2.27-tuning-from-format-strings.log").read_text()
    head, tail = text[:text.index("AllReduce: 67108864") - 40], text[text.index("AllReduce: 67108864") - 40:]
    log = tmp_path / "node0.1000"
    log.write_text("")
    log = log.rename(tmp_path / "nccl.node0.1000")
    ctx = SimpleNamespace(nccl_logs=nccl.Follower(environ), world_size=8,
                          requested={"NCCL_ALGO": "NVLS", "NCCL_NVLS_ENABLE": "1"})
    log.write_text(head)                                           # the run so far: init and the small sizes
    fields = Context.evidence(ctx, "all_reduce", 4096)
    assert fields["effective"]["choices"] == [{"collective": "AllReduce", "size_bytes": [4096, 4096], "algo": "Tree",
                                               "proto": "LL", "channels": [0, 1]}]
    assert fields["applied"]["NCCL_ALGO"]["status"] == "not applied"
    assert fields["applied"]["NCCL_NVLS_ENABLE"]["status"] == "applied"
    with open(log, "a") as f:
        f.write(tail)                                              # the 64M and 256M calls
    fields = Context.evidence(ctx, "all_reduce", 268435456)
    eff = fields["effective"]
    assert eff["version"] == "2.27.7" and eff["channels"]["nvls"] == 16 and "lines" not in eff
    assert eff["choices"] == [{"collective": "AllReduce", "size_bytes": [67108864, 268435456], "algo": "NVLS",
                               "proto": "Simple", "channels": [0, 15]}]
    assert nccl.run_summary([eff]) == "NCCL 2.27.7, NVLS on, AllReduce Algo NVLS/Simple from 64M"
    # a second rank's log of the node is read too: its NET lines (real: the 2.27.3 4-node log)
    (tmp_path / "nccl.node0.1001").write_text((LOGS / "nccl-2.27.3-g6e-4node-libfabric.log").read_text())
    eff = Context.evidence(ctx, "all_reduce", 268435456)["effective"]
    assert eff["gdr"] == "none" and eff["net"] == "Libfabric"


def test_a_user_debug_file_is_read_for_this_process_only(tmp_path):
    environ = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "mine.%h.%p")}
    (tmp_path / f"mine.host.{os.getpid()}").write_text((LOGS / "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log")
                                                       .read_text())
    (tmp_path / "mine.host.1").write_text("h:1:1 [0] NCCL INFO Using network Socket\n")
    eff = nccl.Follower(environ).effective()
    assert eff["net"] == "IB" and eff["version"] == "2.22.3"
    assert nccl.Follower({}).effective() == {"transport": "nccl", "evidence_note": nccl.partial({})}
