"""Specs, topologies and sweep matrices as hostile input (issue 23): every file a command reads that is not what it
should be is one line naming it (never its content, never an escape sequence, never a traceback), fast and in
bounded memory; accept --dry-run runs nothing a spec names; a spec value never becomes an option; env takes the
catalogue rule; accept keeps what it wrote when its --out fills up."""
import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest

from commbench.commands.accept import command as accept
from commbench.commands.accept import outputs
from commbench.commands.accept import spec as accept_spec
from commbench.commands.accept.kinds import KINDS
from tests.commbench.commands.test_accept import GOOD
from tests.conftest import ROOT, assert_one_line_error, read_records, run_tool

pytestmark = pytest.mark.host_mount   # runs iobench on a host file system (its lock: one at a time)

GiB = 1 << 30
MARKER = "SECRET-MARKER-7f3a"
TOPOLOGY = (ROOT / "topologies" / "dgx-h100.yaml").read_text()   # init needs ceilings (localhost has none)


def bomb(levels=9):
    """Billion laughs, one value: each level nine aliases of the one before (9**levels strings when expanded),
    placed where each kind of file's reader would show or expand it."""
    parts = ['&a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    parts += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    value = f"[{', '.join(parts)}]"
    return {"spec": f"checks:\n  - name: x\n    kind: commbench\n    collective: {value}\n"
                    "    thresholds: [wrong == 0]\n",
            "topology": f"name: {value}\n", "matrix": f"env: {{NCCL_ALGO: {value}}}\n"}


# what a command reads -> argv taking the file (FILE) and the kind of file it expects
READERS = {
    "accept --spec": (("commbench", "accept", "--spec", "FILE", "--out", "OUT"), "spec"),
    "accept --spec --dry-run": (("commbench", "accept", "--spec", "FILE", "--dry-run"), "spec"),
    "accept --init --topology": (("commbench", "accept", "--init", "--topology", "FILE"), "topology"),
    "model --topology": (("commbench", "model", "--topology", "FILE", "--nodes", "2"), "topology"),
    "run --dry-run --topology": (("commbench", "run", "--dry-run", "--topology", "FILE", "-b", "1K", "-e", "1K"),
                                 "topology"),
    "sweep --matrix": (("commbench", "sweep", "--matrix", "FILE", "--dry-run", "-b", "1K", "-e", "1K"), "matrix"),
}
HOSTILE = {   # file name -> bytes: each is not what any reader wants
    "billion-laughs": {kind: text.encode() for kind, text in bomb().items()},
    "nested-400": ("[" * 400 + "]" * 400 + "\n").encode(),
    "nested-mappings": "".join(f"{' ' * i}k{i}:\n" for i in range(300)).encode(),
    "binary": bytes(range(256)) * 4,
    "not-utf8": b"name: \xff\xfe caf\xe9\n",
    "secret-not-yaml": f"{MARKER} \x1b]0;owned\x07 \x1b[31mred\x1b[0m: : [ {{\n".encode(),
    "secret-shadow": f"root:$6${MARKER}\x1b]8;;http://x\x1b\\:19000:0:99999:7:::\n"
                     f"daemon:*:{MARKER}\x1b[2J:0:99999:7:::\n".encode(),
    "secret-plain-shadow": f"root:$6${MARKER}:19000:0:99999:7:::\ndaemon:*:{MARKER}:0:99999:7:::\n".encode(),
    "secret-undefined-alias": f"checks: *{MARKER}\n".encode(),
    "huge-integer": ("a: " + "9" * 5000 + "\n").encode(),
    "bad-date": b"a: 2020-13-45\n",
}


def command(reader, path, tmp_path):
    argv, _ = READERS[reader]
    return [str(path) if a == "FILE" else str(tmp_path / "out") if a == "OUT" else a for a in argv]


def assert_refused(proc, name=None):
    """One short line naming the file, none of its content; a hang (a FIFO read, /dev/zero) is run_tool's timeout."""
    assert_one_line_error(proc, name or "")
    assert MARKER not in proc.stderr and MARKER not in proc.stdout
    assert "\x1b" not in proc.stderr and "\x1b" not in proc.stdout
    assert len(proc.stderr) < 600, proc.stderr


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("content", HOSTILE)
def test_a_hostile_file_is_refused_in_one_line_naming_it_without_its_content(tmp_path, reader, content):
    path = tmp_path / f"{content}.yaml"
    data = HOSTILE[content]
    path.write_bytes(data[READERS[reader][1]] if isinstance(data, dict) else data)
    proc = run_tool(*command(reader, path, tmp_path), timeout=30, memory_limit=GiB)
    assert_refused(proc, str(path))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "directory"])
def test_an_input_that_is_not_a_regular_file_is_refused_at_once(tmp_path, reader, kind):
    path = {"fifo": tmp_path / "in.yaml", "/dev/zero": "/dev/zero", "directory": tmp_path / "dir.yaml"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    proc = run_tool(*command(reader, path, tmp_path), timeout=30, memory_limit=GiB)
    assert_refused(proc, str(path))


def arguments():
    """(kind, key, the check's other keys) for every spec key that becomes an argument and takes text."""
    needs = {"commbench": {"collective": "all_reduce"}, "iobench": {"mounts": ["/tmp"]}}
    for kind, row in KINDS.items():
        for key, (_, vkind) in row.options.items():
            if vkind in ("text", "names", "paths"):
                yield kind, key, {} if key in (*row.one_of, *row.required) else needs.get(kind, {})
    yield "commbench", "top-level topology", needs["commbench"]


@pytest.mark.parametrize("kind, key, other", list(arguments()), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("value", ["--plot=PLOT", "--keep", "-x"])
def test_a_spec_value_never_becomes_an_option(tmp_path, kind, key, other, value):
    value = value.replace("PLOT", str(tmp_path / "x.png"))
    check = {"name": "c", "kind": kind, **other, "thresholds": ["wrong == 0" if kind != "iobench" else
                                                                "shard-write MB/s >= 1"]}
    top = {}
    if key == "top-level topology":
        top["topology"] = value
    else:
        check[key] = [value] if KINDS[kind].options[key][1] == "paths" else value
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps({**top, "checks": [check]}))
    for extra in ((), ("--dry-run",)):
        proc = run_tool("commbench", "accept", "--spec", path, "--out", tmp_path / "out", *extra, timeout=60)
        assert_one_line_error(proc, f"{path}:")
        assert "'-" in proc.stderr or "not starting with '-'" in proc.stderr, proc.stderr
        assert not (tmp_path / "out").exists() and not (tmp_path / "x.png").exists()
        assert not list(tmp_path.glob("iobench-*"))


SPEC_DEFECTS = {   # what is wrong -> (edit of GOOD, what the line says)
    "timeout .nan": (("    thresholds:", "    timeout: .nan\n    thresholds:"), "finite"),
    "timeout .inf": (("    thresholds:", "    timeout: .inf\n    thresholds:"), "finite"),
    "timeout 1e999": (("    thresholds:", "    timeout: 1e999\n    thresholds:"), "timeout"),
    "timeout -1": (("    thresholds:", "    timeout: -1\n    thresholds:"), "> 0"),
    "timeout a year": (("    thresholds:", "    timeout: 31536000\n    thresholds:"), "<="),
    "iters 1e999": (("    min_bytes: 1K", "    iters: 1e999\n    min_bytes: 1K"), "whole number"),
    "size of 5000 digits": (("    min_bytes: 1K", "    min_bytes: " + "9" * 5000), "not valid YAML"),
    "size 10**30": (("    min_bytes: 1K", "    min_bytes: " + "9" * 30), "a size"),
    "topology [1,2]": (("checks:", "topology: [1, 2]\nchecks:"), "topology: expected text"),
    "threshold of 5,000 characters": (("      - wrong == 0", "      - busbw_gbps >= " + "x" * 5000), "is not FIELD OP"),
    "field of 5,000 characters": (("      - wrong == 0", "      - " + "f" * 5000 + " >= 1"), "have no field"),
    "size of 100 KB": (("    min_bytes: 1K", '    min_bytes: "1' + " " * 100_000 + 'x"'), "expected a size"),
    "NUL in an env value": (("    thresholds:", '    env: {NCCL_DEBUG: "INFO\\0x"}\n    thresholds:'), "NUL"),
    "env name with =": (("    thresholds:", '    env: {"A=B": x}\n    thresholds:'), "not a variable name"),
    "unknown env": (("    thresholds:", "    env: {PYTHONPATH: /tmp}\n    thresholds:"), "allow_unknown_env: true"),
    "LD_PRELOAD": (("    thresholds:", "    env: {LD_PRELOAD: /tmp/x.so}\n    thresholds:"), "unknown variable"),
    "LD_PRELOAD with allow_paths": (("    thresholds:", "    allow_paths: true\n    env: {LD_PRELOAD: /tmp/x.so}\n"
                                                      "    thresholds:"), "unknown variable"),
    "a plugin library": (("    thresholds:", "    env: {NCCL_NET_PLUGIN: /tmp/x.so}\n    thresholds:"),
                         "NCCL_NET_PLUGIN=/tmp/x.so names a library or file NCCL loads or writes: only with "
                         "allow_paths"),
    "a file to read": (("    thresholds:", "    env: {NCCL_TOPO_FILE: /etc/shadow}\n    thresholds:"),
                       "NCCL_TOPO_FILE=/etc/shadow names a library or file NCCL loads or writes: only with "
                       "allow_paths"),
    "a test hook": (("    thresholds:", '    allow_unknown_env: true\n    env: {COMMBENCH_TEST_STALL: "1:1"}\n'
                                      "    thresholds:"), "COMMBENCH_TEST_STALL is a test hook of commbench's own"),
    "the hooks' switch": (("    thresholds:", '    allow_unknown_env: true\n    env: {COMMBENCH_TEST_HOOKS: "1"}\n'
                                            "    thresholds:"), "COMMBENCH_TEST_HOOKS is a test hook"),
    "name with ESC": (("name: one", 'name: "one\\e]0;x\\a"'), "printable"),
    "exec {host}": (("checks:", 'cluster: {exec: "ssh {host} {node}", rdzv_endpoint: "h:29500"}\nchecks:'),
                    "hole other than {node}"),
    "exec {0}": (("checks:", 'cluster: {exec: "ssh {0} {node}", rdzv_endpoint: "h:29500"}\nchecks:'), "{0}"),
    "exec lone {": (("checks:", 'cluster: {exec: "ssh { {node}", rdzv_endpoint: "h:29500"}\nchecks:'), "lone {"),
    "exec unclosed quote": (("checks:", "cluster: {exec: \"ssh 'n{node}\", rdzv_endpoint: \"h:29500\"}\nchecks:"),
                            "does not split"),
    "exec no program": (("checks:", 'cluster: {exec: "/nonexistent/ssh {node}", rdzv_endpoint: "h:29500"}\nchecks:'
                         ), "no program"),
    "exec {node.x}": (("checks:", 'cluster: {exec: "ssh {node.x} {node}", rdzv_endpoint: "h:29500"}\nchecks:'),
                      "hole other than {node}"),
    "port past 65535": (("checks:", 'cluster: {exec: "ssh n{node}", rdzv_endpoint: "h:99999"}\nchecks:'),
                        "port 1-65535"),
}


@pytest.mark.parametrize("defect", SPEC_DEFECTS)
def test_a_spec_value_out_of_shape_or_range_is_one_line(tmp_path, defect):
    (old, new), needle = SPEC_DEFECTS[defect]
    text = GOOD.replace(old, new, 1).replace("    min_bytes: 1K", "    nodes: 2\n    min_bytes: 1K"
                                             if defect.startswith("exec") else "    min_bytes: 1K")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    for extra in ((), ("--dry-run",)):
        proc = run_tool("commbench", "accept", "--spec", path, "--out", tmp_path / "out", *extra, timeout=30,
                        memory_limit=GiB)
        assert_refused(proc, str(path))
        assert needle in proc.stderr
        assert not (tmp_path / "out").exists()


MATRICES = {
    "env a list": "env: [NCCL_ALGO, Ring]\n",
    "env of mappings": "env: {NCCL_ALGO: {a: 1}}\n",
    "configs of numbers": "configs: [1, 2]\n",
    "exclude a mapping": "exclude: {NCCL_ALGO: Ring}\n",
    "baseline text": "baseline: maybe\nenv: {NCCL_ALGO: [Ring, Tree]}\n",
    "NUL in a value": 'env: {NCCL_DEBUG_SUBSYS: ["INIT\\0", NET]}\n',
    "a product of 10**12": "env:\n" + "".join(f"  NCCL_IB_SL{i}: [{', '.join(map(str, range(10)))}]\n"
                                              for i in range(12)),
}


@pytest.mark.parametrize("matrix", MATRICES)
def test_a_sweep_matrix_of_the_wrong_shape_is_one_line(tmp_path, matrix):
    path = tmp_path / "m.yaml"
    path.write_text(MATRICES[matrix])
    proc = run_tool("commbench", "sweep", "--matrix", path, "--allow-unknown", "--dry-run", "-b", "1K", "-e", "1K",
                    timeout=30, memory_limit=GiB)
    assert_refused(proc)


def test_a_dry_run_runs_nothing_the_spec_names(tmp_path):
    """cluster.exec, and env's PYTHONPATH (a sitecustomize.py) would each leave a marker if run."""
    marker = tmp_path / "ran"
    prog = tmp_path / "prefix"
    prog.write_text(f"#!/bin/sh\ntouch {marker}-exec\nexec \"$@\"\n")
    prog.chmod(0o755)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(f"open({str(marker) + '-site'!r}, 'w').close()\n")
    path = tmp_path / "spec.yaml"
    path.write_text(f"cluster: {{exec: '{prog} {{node}}', rdzv_endpoint: '127.0.0.1:29555'}}\n" + GOOD.replace(
        "    min_bytes: 1K", f"    nodes: 2\n    allow_unknown_env: true\n    env: {{PYTHONPATH: {tmp_path}/site}}\n"
        "    min_bytes: 1K"))
    proc = run_tool("commbench", "accept", "--spec", path, "--dry-run", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"{prog} 0 env PYTHONPATH={tmp_path}/site " in proc.stdout and f"{prog} 1 env " in proc.stdout
    assert not list(tmp_path.glob("ran*"))


def test_junit_stays_well_formed_when_a_name_or_reason_holds_control_characters(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(GOOD)
    spec = accept_spec.load_spec(path)
    check = spec.checks[0]
    check.name = "one\x01\x1b[31m\x00"
    result = accept.Result(check, ["cmd \x07"], reason="exit 1: \x1b]0;x\x07 \x0b bad", seconds=1.0)
    outputs.junit([result], spec, 1.0, tmp_path / "junit.xml")
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert root.find(".//failure").get("message").startswith("exit 1: ")
    assert "\x1b" not in (tmp_path / "junit.xml").read_text()


@pytest.mark.parametrize("name", ["a: b #c.yaml", "new\nline.yaml", "'quote\" #x.yaml"])
def test_init_quotes_what_it_writes_and_its_spec_reads_back(tmp_path, name):
    topo = tmp_path / name
    topo.write_text(TOPOLOGY)
    proc = run_tool("commbench", "accept", "--init", "--topology", topo, "--nodes", "2", timeout=60)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "spec.yaml"
    path.write_text(proc.stdout.replace("[/raid]", "[/tmp]"))
    spec = accept_spec.load_spec(path)
    assert {c.values.get("topology") for c in spec.checks if c.kind == "commbench"} == {str(topo)}
    dry = run_tool("commbench", "accept", "--spec", path, "--dry-run", timeout=60)
    assert dry.returncode == 0, dry.stderr


def write_io_spec(tmp_path, env=""):
    path = tmp_path / "io.yaml"
    path.write_text(f"""checks:
  - name: io
    kind: iobench
    mounts: [{tmp_path}]
    profiles: [shard-write]
    quick: true
    size: 1M
    ranks: 1
{env}    thresholds:
      - shard-write MB/s >= 0.001
""")
    return path


@pytest.mark.slow
def test_an_unknown_env_variable_runs_only_when_the_spec_allows_it_and_the_verdict_says_so(tmp_path):
    env = "    env: {MY_TOOL_FLAG: '1'}\n"
    proc = run_tool("commbench", "accept", "--spec", write_io_spec(tmp_path, env), "--out", tmp_path / "out")
    assert_one_line_error(proc, "unknown variable MY_TOOL_FLAG")
    assert "allow_unknown_env: true" in proc.stderr and not (tmp_path / "out").exists()
    spec = write_io_spec(tmp_path, env + "    allow_unknown_env: true\n")
    proc = run_tool("commbench", "accept", "--spec", spec, "--out", tmp_path / "out", timeout=120)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr   # 1: another iobench ran
    assert "MY_TOOL_FLAG set with allow_unknown_env: true" in proc.stderr
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert verdict["checks"][0]["allow_unknown_env"] and verdict["checks"][0]["env"] == {"MY_TOOL_FLAG": "1"}
    assert any("MY_TOOL_FLAG" in note for note in verdict["notes"])
    assert "MY_TOOL_FLAG set with allow_unknown_env" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("option", [["--on-fail", "drain"], ["--on-error", "drain"], ["--on-pass", "resume"]])
def test_draining_or_resuming_nodes_outside_slurm_is_one_line_before_anything_runs(tmp_path, option):
    proc = run_tool("commbench", "accept", "--spec", write_io_spec(tmp_path), "--out", tmp_path / "out", *option,
                    env={"SLURM_JOB_ID": "", "SLURMD_NODENAME": ""}, timeout=60)
    assert_one_line_error(proc, f"{' '.join(option)} works inside a Slurm allocation (sbatch, salloc) or a node's "
                                "own Slurm script (Prolog, Epilog, HealthCheckProgram: SLURMD_NODENAME)")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_library_or_file_path_runs_only_when_the_spec_allows_paths_and_the_verdict_names_it(tmp_path):
    """NCCL_NET_PLUGIN (a library NCCL loads) and NCCL_TOPO_FILE (a file it reads) passed the gate that refuses
    LD_PRELOAD, with no note; now they need allow_paths: true, and the run, verdict.json and report name them."""
    env = "    env: {NCCL_NET_PLUGIN: /tmp/x.so, NCCL_TOPO_FILE: /etc/shadow}\n"
    proc = run_tool("commbench", "accept", "--spec", write_io_spec(tmp_path, env), "--out", tmp_path / "out")
    assert_one_line_error(proc, "NCCL_NET_PLUGIN=/tmp/x.so names a library or file NCCL loads or writes")
    assert not (tmp_path / "out").exists()
    spec = write_io_spec(tmp_path, env + "    allow_paths: true\n")
    proc = run_tool("commbench", "accept", "--spec", spec, "--out", tmp_path / "out", timeout=120)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr   # 1: another iobench ran
    note = ("io: env NCCL_NET_PLUGIN=/tmp/x.so, NCCL_TOPO_FILE=/etc/shadow: a library or file NCCL loads or writes, "
            "set with allow_paths: true")
    assert f"note: {note}" in proc.stderr
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert verdict["notes"] == [note] and verdict["checks"][0]["allow_paths"]
    assert note in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.slow
def test_a_cluster_exec_prefix_with_a_clean_environment_still_gets_the_checks_env(tmp_path):
    """Under an ssh-like prefix (here `env -i`: the command starts with an empty environment) the spec's env was
    not applied: the records' env lacked NCCL_DEBUG while verdict.json listed it. It now follows the prefix as
    `env NCCL_DEBUG=WARN`: every node's records show what the verdict lists."""
    path = tmp_path / "spec.yaml"
    path.write_text('cluster: {exec: "env -i PATH=/usr/bin:/bin NODE={node}", rdzv_endpoint: "127.0.0.1:29613"}\n' +
                    GOOD.replace("    min_bytes: 1K", "    nodes: 2\n    nproc_per_node: 1\n    iters: 2\n"
                                 "    env: {NCCL_DEBUG: WARN}\n    min_bytes: 1K"))
    proc = run_tool("commbench", "accept", "--spec", path, "--out", tmp_path / "out", timeout=180)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    recs = [r for r in read_records(tmp_path / "out" / "results.jsonl") if not r.get("event")]
    assert verdict["checks"][0]["env"] == {"NCCL_DEBUG": "WARN"} and len(recs) == 3
    assert all(r["env"]["NCCL_DEBUG"] == "WARN" and r["nodes"] == 2 for r in recs), [r["env"] for r in recs]
    # beside what was asked, what the records prove took effect (the launcher's Gloo interface here), at its worst
    applied = verdict["checks"][0]["applied"]
    assert applied == {var: st for r in recs for var, st in r["applied"].items()}, applied
    assert applied["GLOO_SOCKET_IFNAME"]["status"] == "applied" and "Gloo connections" in \
        applied["GLOO_SOCKET_IFNAME"]["evidence"], applied


def mount_tmpfs(where, *options):
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)], check=True)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_an_out_that_cannot_be_written_is_refused_before_running_and_a_full_one_keeps_what_was_written(tmp_path):
    ro, full = tmp_path / "ro", tmp_path / "full"
    mount_tmpfs(ro, "ro", "size=32k")
    mount_tmpfs(full, "size=32k")
    try:   # 3 of the 8 pages left: results.jsonl, verdict.json and junit.xml fit (one check), the report does not
        (full / "filler").write_bytes(b"x" * 5 * 4096)
        spec = write_io_spec(tmp_path)
        proc = run_tool("commbench", "accept", "--spec", spec, "--out", ro / "out", timeout=60)
        assert_one_line_error(proc, f"--out {ro / 'out'}: Read-only file system")
        proc = run_tool("commbench", "accept", "--spec", spec, "--out", full / "out", timeout=120)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert last.startswith(("error: could not write ", "error: cannot write ")) and "No space left on device" in last, last
        assert "report" in last.split("kept")[0] and "verdict.json" in last.split("kept")[1], last
        verdict = json.loads((full / "out" / "verdict.json").read_text())
        assert verdict["checks"][0]["name"] == "io" and verdict["checks"][0]["ran"]
        ET.parse(full / "out" / "junit.xml")
    finally:
        for where in (ro, full):
            subprocess.run(["umount", str(where)], check=False)
