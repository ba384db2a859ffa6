"""The ssh launcher's host list, its command template and its refusals (the runs over real sshds are in
tests/netns/test_ssh.py)."""
import json
import shlex

import pytest

from benchcore.errors import UserError
from commbench.launch import ssh
from tests.conftest import assert_one_line_error, run_tool


def test_host_list_from_hosts_and_hostfile(tmp_path):
    assert ssh.host_list("n1, n2,root@n3", None) == ["n1", "n2", "root@n3"]
    f = tmp_path / "hosts"
    f.write_text("# rack 1\nn1 slots=8\n\n  n2   # spare\nroot@10.0.0.3\n")
    assert ssh.host_list(None, str(f)) == ["n1", "n2", "root@10.0.0.3"]
    assert ssh.host_list(None, None) == []


@pytest.mark.parametrize("text, needle", [
    ("n1,-oProxyCommand=x", "is not a host name"), ("n1,a b", "is not a host name"), ("n1,$(reboot)", "is not a host"),
    ("n1,n2,n1", "names n1 twice"), (",,", "names no host"),
    ("localhost,n2", "names each host itself"), ("n1,root@127.0.0.1", "names each host itself")])
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


def test_dry_run_shows_each_hosts_link_and_nothing_of_the_user_on_the_remote_line():
    done = run_tool("commbench", "run", "--collective", "all_reduce", "-b", "1K", "-e", "1K", "--dry-run",
                    "--hosts", "n1,n2,n3", "--ssh-command", "ssh -o BatchMode=yes -l admin {host}")
    assert done.returncode == 0, done.stderr
    links = [shlex.split(ln) for ln in done.stdout.splitlines() if "commbench.launch.ssh link" in ln]
    assert len(links) == 2 and "# hosts 2..2: as host 1" in done.stdout
    for i, argv in enumerate(links):
        desc = json.loads(argv[-1])
        assert desc["host"] == f"n{i + 1}" and desc["argv"][:5] == ["ssh", "-o", "BatchMode=yes", "-l", "admin"]
        assert desc["argv"][5] == f"n{i + 1}" and shlex.split(desc["argv"][6])[1:] == ["-m", "commbench.launch.ssh"]
        assert desc["orders"]["endpoint"].startswith("n1:") and desc["orders"]["first"] == (i == 0)


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
