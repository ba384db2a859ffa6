"""The ssh launcher's host list, its command template and its refusals (the runs over real sshds are in
tests/netns/test_ssh.py)."""
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchcore.errors import UserError
from benchcore.processes import procs
from commbench.launch import ssh
from tests.conftest import BIN, assert_one_line_error, run_tool


def test_host_list_from_hosts_and_hostfile(tmp_path):
    assert ssh.host_list("n1, n2,root@n3", None) == ["n1", "n2", "root@n3"]
    f = tmp_path / "hosts"
    f.write_text("# rack 1\nn1 slots=8\n\n  n2   # spare\nroot@10.0.0.3\n")
    assert ssh.host_list(None, str(f)) == ["n1", "n2", "root@10.0.0.3"]
    assert ssh.host_list(None, None) == []
    assert ssh.host_list("node1,node10,10.0.0.1,10.0.0.10,face,fac", None)[-1] == "fac"   # near names stay apart


def test_two_spellings_of_one_host_in_a_hostfile_are_refused_by_line(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("n1\nN2\nn2.\n")
    with pytest.raises(UserError, match="names the host on line 2 and the host on line 3, one host"):
        ssh.host_list(None, str(f))


@pytest.mark.parametrize("text, needle", [
    ("n1,-oProxyCommand=x", "is not a host name"), ("n1,a b", "is not a host name"), ("n1,$(reboot)", "is not a host"),
    ("n1,n2,n1", "names n1 twice"), (",,", "names no host"),
    ("localhost,n2", "names each host itself"), ("n1,root@127.0.0.1", "names each host itself"),
    ("LocalHost.,n2", "names each host itself"),
    # one host under two spellings (issue 46 N15): case, user@, a trailing dot, one IPv4 address spelled twice
    ("Node1,node1", "names Node1 and node1, one host"), ("node1,root@node1", "names node1 and root@node1, one host"),
    ("node1,node1.", "names node1 and node1., one host"), ("10.0.0.1,10.1", "names 10.0.0.1 and 10.1, one host"),
    ("10.0.0.1,admin@10.0.0.001", "one host (one agent per host)")])
def test_bad_host_lists_are_refused(text, needle):
    with pytest.raises(UserError) as exc:
        ssh.host_list(text, None)
    assert needle in str(exc.value)


def test_host_is_one_word_of_the_template():
    words = ssh.ssh_words("ssh -o BatchMode=yes -p 2222 {host}", "root@n1")
    assert words == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "root@n1"]
    with pytest.raises(UserError, match="has no {host}"):
        ssh.ssh_words("ssh n1", "n1")
    with pytest.raises(UserError, match="No closing quotation"):
        ssh.ssh_words("ssh '{host}", "n1")


def test_dry_run_shows_the_first_link_and_nothing_of_the_user_on_the_remote_line():
    done = run_tool("commbench", "run", "--collective", "all_reduce", "-b", "1K", "-e", "1K", "--dry-run",
                    "--hosts", "n1,n2,n3", "--ssh-command", "ssh -o BatchMode=yes -l admin {host}")
    assert done.returncode == 0, done.stderr
    links = [shlex.split(ln) for ln in done.stdout.splitlines() if "commbench.launch.ssh link" in ln]
    assert len(links) == 1 and "# hosts 2..2: as host 1" in done.stdout
    desc = json.loads(links[0][-1])
    assert desc["hosts"] == ["n1", "n2"] and desc["first"] is True
    assert desc["ssh"] == ["ssh", "-o", "BatchMode=yes", "-l", "admin", "{host}"]
    assert shlex.split(desc["remote"])[1:] == ["-m", "commbench.launch.ssh"]
    assert desc["orders"]["endpoint"].startswith("n1:")


def test_hosts_are_split_into_links_of_at_most_link_hosts(tmp_path):
    spec = SimpleNamespace(hosts=[f"n{i}" for i in range(2 * ssh.LINK_HOSTS + 1)], dry_run=False, env={},
                           ssh_command="ssh {host}")
    links = [json.loads(argv[-1]) for argv, _ in ssh.commands(spec, SimpleNamespace(run_id="r"), "plan.json")]
    assert [len(d["hosts"]) for d in links] == [ssh.LINK_HOSTS, ssh.LINK_HOSTS, 1]
    assert [d["first"] for d in links] == [True, False, False] and sum((d["hosts"] for d in links), []) == spec.hosts
    assert max(len(json.dumps(d)) for d in links) < 128 << 10   # one argument: Linux's MAX_ARG_STRLEN


def test_the_env_a_host_gets_is_what_a_local_rank_would_record(monkeypatch):
    """N13: the prefixes a record keeps, the catalogue's variables and those an accept check named reach each host;
    the rest of this environment and this machine's per-node settings do not."""
    for k, v in {"UCX_TLS": "tcp", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_ALGO": "Ring", "SITE_NOTE": "a b",
                 "OTHER": "x", "COMMBENCH_STATUS_DIR": "/here", "COMMBENCH_ENV_NAMES": "SITE_NOTE,NOT_SET"}.items():
        monkeypatch.setenv(k, v)
    env = ssh.forwarded_env(SimpleNamespace(env={"NCCL_PROTO": "Simple"}))
    assert {k: env.get(k) for k in ("UCX_TLS", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_ALGO", "SITE_NOTE", "NCCL_PROTO")}\
        == {"UCX_TLS": "tcp", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_ALGO": "Ring", "SITE_NOTE": "a b",
            "NCCL_PROTO": "Simple"}
    assert "OTHER" not in env and "COMMBENCH_STATUS_DIR" not in env and "NOT_SET" not in env


def test_a_host_file_over_the_limit_is_refused_in_one_line(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"host{i}\n" for i in range(ssh.MAX_HOSTS + 1)))
    assert_one_line_error(run_tool("commbench", "run", "--hostfile", hosts, "--backend", "nccl", "-b", "1K", "-e",
                                   "1K", "--dry-run"), f"names more than {ssh.MAX_HOSTS} hosts")


def launch_processes(marker):
    """{pid: (argv, RSS in KiB)} of the processes whose command line holds marker."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            rss = int(next(ln.split()[1] for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                           if ln.startswith("VmRSS:")))
        except (OSError, StopIteration):
            continue
        if any(marker.encode() in a for a in argv):
            out[int(pid)] = (argv, rss)
    return out


@pytest.mark.slow
def test_150_hosts_that_refuse_ssh_hold_one_link_and_fanout_ssh_at_once(tmp_path):
    """Issue 46 N14, as reproduced: 150 hosts whose ssh fails after 2 s. One link process drives them (it was one
    Python process of ~16 MB per host, 82 at once: 1.3 GB), at most FANOUT ssh connect at once, the first failure
    stops the launch and names its host; sampled every 0.05 s while it runs."""
    fake = tmp_path / "sshfail"
    fake.write_text('#!/bin/sh\nsleep 2; echo "ssh: connect to host $1 port 22: Connection timed out" >&2; exit 255\n')
    fake.chmod(0o755)
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"node{i:03d}\n" for i in range(150)))
    proc = subprocess.Popen([BIN / "commbench", "run", "--hostfile", hosts, "--ssh-command", f"{fake} {{host}}",
                             "-b", "1K", "-e", "1K"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    most_links, most_ssh, most_rss = 0, 0, 0
    while proc.poll() is None:
        seen = launch_processes(str(tmp_path))
        links = {pid: rss for pid, (argv, rss) in seen.items() if b"link" in argv}
        # a link's child between its fork and its exec of ssh still shows the link's argv: not a second link
        links = [rss for pid, rss in links.items() if getattr(procs.proc_stat(pid), "ppid", None) not in links]
        most_links, most_rss = max(most_links, len(links)), max(most_rss, sum(links))
        most_ssh = max(most_ssh, sum(1 for argv, _ in seen.values() if argv[1:2] == [str(fake).encode()]))
        time.sleep(0.05)
    err = proc.stderr.read()
    print(f"at most {most_links} link process(es), {most_rss / 1024:.1f} MB; {most_ssh} ssh at once")
    assert proc.returncode == 1, err
    assert re.search(r"host node\d{3} refuses ssh \(exit 255\): ssh: connect to host node\d{3} port 22", err), err
    assert most_links == 1 and 0 < most_ssh <= ssh.FANOUT
    assert most_rss < 64 << 10, most_rss   # one Python process, not 150
    assert not launch_processes(str(tmp_path))


@pytest.mark.parametrize("codes, expected", [({"h0": 4, "h1": 1}, 4), ({"h0": 1, "h1": 4}, 4),
                                             ({"h0": 3, "h1": 1}, 3)])
def test_a_links_exit_status_is_a_hang_first_then_the_first_failing_host_in_list_order(tmp_path, codes, expected):
    """A link's exit status as execute reads it: EXIT_HANG where any host's node agent reported one (rank 0's
    watchdog; its host ends after the others, whose torchrun failed with 1), else the first failing host's in the
    host list's order, whichever ended first (here the last host ends 0.5 s before the first)."""
    fake = tmp_path / "fakessh"   # host h0 ends last; each host's exit status is in the file code.HOST
    fake.write_text(f'#!/bin/sh\n[ "$1" = h0 ] && sleep 0.5\nexit "$(cat {tmp_path}/code.$1)"\n')
    fake.chmod(0o755)
    for host, code in codes.items():
        (tmp_path / f"code.{host}").write_text(str(code))
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    desc = {"hosts": list(codes), "first": True, "ssh": [str(fake), "{host}"], "remote": "node", "orders": {},
            "plan_file": str(plan)}
    env = {k: v for k, v in os.environ.items() if k != "COMMBENCH_STATUS_DIR"}   # no launch directory
    done = subprocess.run([BIN / "python", "-m", "commbench.launch.ssh", "link", json.dumps(desc)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == expected, done.stderr


@pytest.mark.parametrize("args, needle", [
    (["--launcher", "ssh"], "--launcher ssh needs --hosts"),
    (["--hosts", "a,b", "--launcher", "local"], "not with --launcher local"),
    (["--hosts", "a,b", "--nodes", "3"], "--nodes 3, but the host list names 2 hosts"),
    (["--hosts", "a,b", "--hostfile", "x"], "exclude each other"),
    (["--hostfile", "/nonexistent/hosts"], "--hostfile"),
    (["--hosts", "a,b", "--backend", "mpi"], "COMMBENCH_MPIRUN_ARGS"),
    (["--hosts", "a,b", "--rdzv-endpoint", "a:29500"], "not with --launcher ssh"),
    (["--hosts", "a,b", "--ssh-command", "ssh"], "has no {host}")])
def test_launch_option_refusals(args, needle):
    assert_one_line_error(run_tool("commbench", "run", "--dry-run", *args), needle)


SPEC = """checks:
  - name: ar
    kind: commbench
    collective: all_reduce
    nodes: 3
    thresholds: [wrong == 0]
  - name: local
    kind: commbench
    collective: all_reduce
    thresholds: [wrong == 0]
"""


def test_accept_gives_each_multi_node_check_its_share_of_the_hosts(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    done = run_tool("commbench", "accept", "--spec", spec, "--dry-run", "--hosts", "n1,n2,n3,n4",
                    "--ssh-command", "ssh -p 2222 {host}")
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if not ln.startswith("#")]
    assert shlex.split(lines[0])[-4:] == ["--hosts", "n1,n2,n3", "--ssh-command", "ssh -p 2222 {host}"]
    assert "--hosts" not in lines[1]   # a one-node check runs here
    assert_one_line_error(run_tool("commbench", "accept", "--spec", spec, "--dry-run", "--hosts", "n1,n2"),
                          "check ar runs on 3 nodes; --hosts names 2")
    spec.write_text("cluster:\n  exec: 'ssh {node} --'\n  rdzv_endpoint: n1:29500\n" + SPEC)
    assert_one_line_error(run_tool("commbench", "accept", "--spec", spec, "--dry-run", "--hosts", "n1,n2,n3"),
                          "give one or the other")
