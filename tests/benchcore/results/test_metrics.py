"""--metrics and --pushgateway against the real thing: Debian's prometheus-node-exporter (a textfile directory),
prometheus-pushgateway and prometheus (scraping both every second), started once for the module on free loopback
ports with their own config and storage in a temporary directory, stopped also on failure. A commbench run and an
iobench run write a .prom file and push; Prometheus' HTTP API (/api/v1/query, PromQL) returns the values the
records hold. Then the format's rules (escaping, one sample per label set) and the file's safety, without the
daemons."""
import json
import os
import shutil
import socket
import stat
import threading
import time
import urllib.parse
import urllib.request

import pytest

from benchcore import files
from benchcore.errors import UserError
from benchcore.processes import procs
from benchcore.results import metrics
from tests.conftest import assert_one_line_error, read_records, run_tool

BINARIES = {"prometheus": "prometheus", "node": "prometheus-node-exporter", "push": "prometheus-pushgateway"}
needs_prometheus = pytest.mark.skipif(not all(shutil.which(b) for b in BINARIES.values()),
                                      reason="needs Debian's prometheus, prometheus-node-exporter and "
                                             "prometheus-pushgateway (scripts/setup installs them)")
CONFIG = """\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{node}"]}}]
  - job_name: pushgateway
    honor_labels: true
    static_configs: [{{targets: ["127.0.0.1:{push}"]}}]
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as r:
        return r.read().decode()


class Stack:
    def __init__(self, root):
        self.root, self.procs = root, []
        self.textfiles = root / "textfiles"
        self.textfiles.mkdir()
        self.ports = {k: free_port() for k in BINARIES}
        (root / "prometheus.yml").write_text(CONFIG.format(**self.ports))

    def start(self):
        p = self.ports
        argv = {"node": ["--web.listen-address", f"127.0.0.1:{p['node']}", "--collector.disable-defaults",
                         "--collector.textfile", "--collector.textfile.directory", self.textfiles],
                "push": ["--web.listen-address", f"127.0.0.1:{p['push']}",   # Debian's default: /var/lib/prometheus
                         "--persistence.file", self.root / "pushgateway.data"],
                "prometheus": ["--config.file", self.root / "prometheus.yml", "--storage.tsdb.path", self.root / "tsdb",
                               "--web.listen-address", f"127.0.0.1:{p['prometheus']}"]}
        for key, args in argv.items():
            with open(self.root / f"{key}.log", "w") as log:
                self.procs.append(procs.spawn([shutil.which(BINARIES[key]), *args], stdout=log, stderr=log))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if all(get(f"http://127.0.0.1:{p[k]}{path}") is not None
                       for k, path in (("node", "/metrics"), ("push", "/-/ready"), ("prometheus", "/-/ready"))):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("the Prometheus stack did not start: " + " | ".join(
            (self.root / f"{k}.log").read_text()[-500:] for k in BINARIES))

    def stop(self):
        for proc in self.procs:
            procs.stop(proc, grace=5)

    def query(self, promql, want, timeout=30):
        """The result of an instant query, polled until it holds `want` series (the next scrapes)."""
        url = f"http://127.0.0.1:{self.ports['prometheus']}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(get(url))
            assert reply["status"] == "success", reply
            if len(reply["data"]["result"]) >= want or time.monotonic() > deadline:
                return reply["data"]["result"]
            time.sleep(0.5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("prometheus"))
    try:
        s.start()
        yield s
    finally:
        s.stop()


@needs_prometheus
@pytest.mark.slow
def test_a_commbench_run_reaches_prometheus_through_the_textfile_and_the_pushgateway(stack, tmp_path):
    out, prom = tmp_path / "r.jsonl", stack.textfiles / "commbench_run.prom"
    proc = run_tool("commbench", "run", "--nodes", 2, "--collective", "all_reduce,all_gather", "-b", "64K", "-e",
                    "128K", "-n", 2, "-w", 1, "--out", out, "--metrics", prom, "--pushgateway",
                    f"http://127.0.0.1:{stack.ports['push']}/", timeout=120)
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    key = lambda r: (r["collective"], r["size_bytes"], str(r["in_place"]).lower())  # noqa: E731
    want = {key(r): r["busbw_gbps"] for r in recs}
    assert len(want) == len(recs) >= 4 and not [p for p in stack.textfiles.iterdir() if p.name != prom.name]
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644   # no temp file left; the collector (another user) reads it
    for job, selector in (("node", 'job="node"'), ("commbench_run", 'job="commbench_run",instance!=""')):
        found = stack.query(f"commbench_busbw_gbps{{{selector}}}", len(want))
        got = {(s["metric"]["collective"], int(s["metric"]["size_bytes"]), s["metric"]["in_place"]):
               float(s["value"][1]) for s in found}
        assert got == want, (job, found)
        labels = found[0]["metric"]
        assert labels["backend"] == "gloo" and labels["world_size"] == "2" and labels["dtype"] == "float32", labels
        assert "run_id" not in labels and labels["host"] == socket.gethostname()
    # PromQL over them: the best all_reduce of the run, as the record says
    (best,) = stack.query('max(commbench_busbw_gbps{job="node",collective="all_reduce"})', 1)
    assert float(best["value"][1]) == max(r["busbw_gbps"] for r in recs if r["collective"] == "all_reduce")
    # a second run replaces the file whole (the collector reads one run, the last)
    proc = run_tool("commbench", "run", "--nodes", 2, "--collective", "all_reduce", "-b", "64K", "-e", "64K", "-n",
                    2, "-w", 1, "--metrics", prom, "--out", tmp_path / "r2.jsonl", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert prom.read_text().count("commbench_busbw_gbps{") == len(read_records(tmp_path / "r2.jsonl")) == 1
    (mtime,) = stack.query('node_textfile_scrape_error{job="node"}', 1)
    assert mtime["value"][1] == "0"


@needs_prometheus
@pytest.mark.slow
@pytest.mark.host_mount
def test_an_iobench_run_reaches_prometheus(stack, tmp_path):
    data, out, prom = tmp_path / "data", tmp_path / "r.jsonl", stack.textfiles / "iobench_ckpt.prom"
    data.mkdir()
    proc = run_tool("iobench", "ckpt", data, "--profile", "shard-write,small-random-write", "--quick", "--size",
                    "8M", "--ranks", 2, "--wait", 120, "--out", out, "--metrics", prom, "--pushgateway",
                    f"http://127.0.0.1:{stack.ports['push']}", timeout=300)   # host_mount: its fixture holds the lock
    assert proc.returncode == 0, proc.stderr
    recs = {r["profile"]: r for r in read_records(out) if not r.get("event")}
    for selector in ('job="node"', 'job="iobench_ckpt"'):
        found = {s["metric"]["profile"]: s for s in stack.query(f"iobench_bw_mbps{{{selector}}}", 2)}
        assert {p: float(s["value"][1]) for p, s in found.items()} == {p: r["bw_mbps"] for p, r in recs.items()}
        assert all(s["metric"]["fs_type"] == recs[p]["fs_type"] and s["metric"]["mount"] == recs[p]["mount"]
                   for p, s in found.items()), found
    # the p99 of the random writes (shard-write's 8 writes have too few samples for one: no series)
    (p99,) = stack.query('iobench_lat_p99_us{job="node"}', 1)
    rec = recs["small-random-write"]
    assert p99["metric"]["profile"] == "small-random-write" and float(p99["value"][1]) == rec["lat_p99_us"]
    assert p99["metric"]["direction"] == "write"


@needs_prometheus
def test_a_pairs_verdict_is_bad_node_and_check_passed_series(stack):
    """A pairs verdict (as commbench pairs writes it across real nodes: tests/netns) as the families read it, pushed
    and queried back: the bad node 1, the others 0, the check failed."""
    verdict = {"event": "verdict", "check": "pairs", "passed": False, "bad_nodes": ["n3"],
               "node_verdicts": [{"host": h, "passed": h != "n3", "reason": None} for h in ("n1", "n2", "n3")]}
    metrics.push(f"http://127.0.0.1:{stack.ports['push']}", metrics.exposition([verdict], "commbench"),
                 "commbench_pairs", "n1")
    bad = stack.query('commbench_bad_node{job="commbench_pairs",check="pairs"} == 1', 1)
    assert [s["metric"]["host"] for s in bad] == ["n3"]
    assert len(stack.query('commbench_bad_node{job="commbench_pairs"}', 3)) == 3
    (passed,) = stack.query('commbench_check_passed{job="commbench_pairs"}', 1)
    assert passed["metric"]["check"] == "pairs" and passed["value"][1] == "0"


def test_label_values_are_escaped_and_equal_labels_are_one_sample():
    recs = [{"collective": "all_reduce", "size_bytes": 1024, "busbw_gbps": v, "host": 'a"b\\c\nd', "dtype": "float32"}
            for v in (1.0, 3.0, 2.0)]
    text = metrics.exposition(recs, "commbench")
    lines = text.splitlines()
    assert lines[:2] == ["# HELP commbench_busbw_gbps " + metrics.FAMILIES[0].help, "# TYPE commbench_busbw_gbps gauge"]
    sample = lines[2]
    assert 'host="a\\"b\\\\c\\nd"' in sample and sample.endswith("} 2.0")   # the median of the three
    # then when the run ended and how long it took (issue 49 item 8: a stale textfile can be alerted on)
    assert [ln.split("{")[0] for ln in lines[3:] if not ln.startswith("#")] == [
        "commbench_last_run_timestamp_seconds", "commbench_last_run_duration_seconds"]
    stamp, took = (float(ln.rsplit(" ", 1)[1]) for ln in lines[3:] if not ln.startswith("#"))
    assert abs(stamp - time.time()) < 3600 and 0 < took < 3600
    assert 'size_bytes="1024"' in sample and "run_id" not in sample
    assert metrics.exposition(recs, "iobench") == ""


def test_a_pairs_link_is_its_best_pairing_and_counts_for_both_its_ends():
    recs = [{"collective": "sendrecv", "size_bytes": 8, "busbw_gbps": bw, "host": a, "peer_host": b}
            for a, b, bw in (("n0", "n1", 4.0), ("n0", "n2", 2.0), ("n1", "n2", 1.0), ("n2", "n1", 0.5))]
    samples = [ln for ln in metrics.exposition(recs, "commbench").splitlines()
               if ln.startswith("commbench_busbw_gbps")]
    got = {ln.split('host="')[1].split('"')[0]: float(ln.rsplit(" ", 1)[1]) for ln in samples}
    # each node's median over the links it is on, a link the best of its pairings (n1-n2 met twice: 1.0)
    assert got == {"n0": 3.0, "n1": 2.5, "n2": 1.5}


def test_the_metrics_file_is_replaced_whole_and_never_through_a_link(tmp_path):
    path = tmp_path / "m.prom"
    files.replace_output(path, "a 1\n", "--metrics")
    files.replace_output(path, "a 2\n", "--metrics")
    assert path.read_text() == "a 2\n" and os.listdir(tmp_path) == ["m.prom"]
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "l.prom"
    link.symlink_to(victim)
    with pytest.raises(UserError, match="symbolic link"):
        files.replace_output(link, "x 1\n", "--metrics")
    os.mkfifo(tmp_path / "f.prom")
    (tmp_path / "d.prom").mkdir()
    for name in ("f.prom", "d.prom"):
        with pytest.raises(UserError, match="not a regular file"):
            files.replace_output(tmp_path / name, "x 1\n", "--metrics")
    other = tmp_path / "other.prom"
    other.write_text("theirs")
    os.chown(other, 4242, 4242)
    with pytest.raises(UserError, match="another user"):
        files.replace_output(other, "x 1\n", "--metrics")
    assert victim.read_text() == "keep" and other.read_text() == "theirs"
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(UserError, match="writable by other users"):
        files.replace_output(open_dir / "m.prom", "x 1\n", "--metrics")


def test_bad_metrics_options_are_one_line_before_anything_runs(tmp_path):
    (tmp_path / "l.prom").symlink_to(tmp_path / "x")
    for args, needle in ((["--metrics", tmp_path / "m.txt"], "FILE.prom"),
                         (["--metrics", tmp_path / "l.prom"], "symbolic link"),
                         (["--metrics", tmp_path / "no" / "m.prom"], "no such directory"),
                         (["--pushgateway", "file:///etc/passwd"], "http://HOST:PORT"),
                         (["--pushgateway", "http://u@127.0.0.1:1"], "http://HOST:PORT")):
        assert_one_line_error(run_tool("commbench", "run", "--nodes", 2, *args, timeout=60), needle)
    assert_one_line_error(run_tool("iobench", "ckpt", tmp_path, "--metrics", tmp_path / "m", timeout=60), "FILE.prom")
    with pytest.raises(UserError, match="--pushgateway http://127.0.0.1:1"):
        metrics.push("http://127.0.0.1:1", "a 1\n", "j", "i")   # a Pushgateway that is not there: one line


def test_a_push_to_a_server_that_drips_a_byte_at_a_time_ends_at_its_deadline():
    """The reproduction's dripping server: it answers one status line, then a byte every 0.5 s (every read
    returns well within a socket timeout). The push gives up at its deadline for the whole push (2 s here, 10 s by
    default), in one line; join's 60 s only catches a hang."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def drip():
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(0.5):
                try:
                    conn.sendall(b"X")
                except OSError:
                    return
    dripping = threading.Thread(target=drip, daemon=True)
    dripping.start()
    said = {}

    def push():
        try:
            metrics.push(f"http://127.0.0.1:{server.getsockname()[1]}", "a 1\n", "j", "i", deadline_s=2)
        except UserError as exc:
            said["error"] = str(exc)
    pushing = threading.Thread(target=push, daemon=True)
    try:
        pushing.start()
        pushing.join(60)
        assert not pushing.is_alive(), "the push did not end at its deadline"
        assert "no whole answer within 2 s; given up" in said["error"], said
    finally:
        stop.set()
        server.close()
        dripping.join(10)
    assert metrics.PUSH_DEADLINE_S == 10
