"""The ssh launcher (--hosts h1,h2,... or --hostfile FILE): one torchrun agent per host, started over ssh, the
rendezvous on the first host, its port derived from the run id.

Three parts:
  link   (this machine, one process per LINK_HOSTS hosts; what the Supervisor starts): runs each of its hosts' ssh
         command (--ssh-command, the host put into its words, never into a shell string), at most FANOUT of them
         connecting at once, in one selector loop; sends each node agent its orders and the plan file on ssh's
         stdin and keeps stdin open; appends the records the record node's agent prints to the launch's channel;
         when ssh itself fails (exit 255: refused, lost) it names the host in one line, hangs up its other hosts
         and tells the other links, which hang up theirs.
  ssh    runs `python -m commbench.launch.ssh` on the host: the same Python path as here, and nothing of the user's
         input on the remote command line (all of it arrives on stdin).
  node   (on each host): writes the plan into a private temp dir, picks the interface that reaches the rendezvous
         host (launch/torchrun.py, as every launcher), runs torchrun in a process group of its own, prints the
         records of its channel on stdout; when its stdin ends (the link ended, ssh was killed, the launcher
         stopped by Ctrl-C or a failure) it stops torchrun's group and every worker of its own, then removes its
         temp dir.
"""
import contextlib
import json
import os
import re
import select
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

from benchcore.errors import UserError
from benchcore.files import open_append, replace_text
from benchcore.inputs import read_text, shown
from commbench.launch.liveness import CHANNEL, EXIT_HANG, REMOTE_STATUS
from commbench.transports import envvars

DEFAULT_SSH = "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=5 -o ServerAliveCountMax=3 {host}"
HOST = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}@)?[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")
# What the launcher holds per host for the whole run: an ssh client (its own process: 8.1 MB RSS each, OpenSSH,
# tests/netns/test_ssh.py) and its 3 pipes in a link (one Python process of 21 MB drives up to LINK_HOSTS hosts; a
# link per host was 16 MB each). MAX_HOSTS hosts hold at most ~8.5 GB (less: the clients share their libraries'
# pages), what a login node can spare; a larger cluster is Slurm's (srun), not ssh's. LINK_HOSTS keeps a link's
# descriptors (3 per host) under the default limit of 1024 and its argument (the host list) under Linux's 128 KiB
# per argument; FANOUT is pdsh's default fan-out: a link opens at most that many ssh connections at once (one
# counts until its node agent is ready), so a failing cluster costs FANOUT handshakes before the launch stops.
MAX_HOSTS = 1024
LINK_HOSTS = 256
FANOUT = 32
PORTS = (29500, 3000)        # as under Slurm: below Linux's ephemeral range
SSH_FAILED = 255             # ssh's own failure (the command's exit status otherwise)
FAILED_MARK = "ssh-failed"   # in the launch directory: a link whose ssh failed; the other links end theirs
MAX_HEADER = 1 << 20
MAX_PLAN = 256 << 20
SHOWN_NODES = 2              # a dry run shows the first link, with node 0 and node 1
LINK_GRACE_S = 5             # a stopped link waits this long for its node agent to stop what it started


def host_list(hosts, hostfile):
    """The hosts of --hosts a,b,c or --hostfile FILE (one per line, its first word; '#' starts a comment, as
    mpirun's and pdsh's files): checked names ([user@]host), each once. [] when neither is given."""
    if hosts and hostfile:
        raise UserError("--hosts and --hostfile exclude each other")
    if hostfile:   # a refusal names a line, never its words: the file may be anything (a link to /etc/shadow)
        found = [(n, ln.split("#", 1)[0].split()[:1]) for n, ln in
                 enumerate(read_text(hostfile, "--hostfile").splitlines(), 1)]
        found = [(n, w[0]) for n, w in found if w]
        names, what = [w for _, w in found], f"--hostfile {shown(hostfile, 80)}"
        label = {h: f"the host on line {n}" for n, h in reversed(found)}.get
    elif hosts:
        names, what = [h.strip() for h in hosts.split(",") if h.strip()], "--hosts"
        label = lambda h: shown(h if HOST.fullmatch(h) else repr(h), 80)   # noqa: E731  (the command line's words)
    else:
        return []
    if not names:
        raise UserError(f"{what} names no host")
    if len(names) > MAX_HOSTS:
        raise UserError(f"{what} names more than {MAX_HOSTS} hosts (an ssh client each on this machine, ~8 MB; "
                        "more nodes: launch under Slurm)")
    for h in names:
        if not HOST.fullmatch(h):
            raise UserError(f"{what}: {label(h)} is not a host name ([user@]host: letters, digits, "
                            "'.', '-', '_'; not starting with '-')")
    local = [h for h in names if host_key(h) == "localhost" or host_key(h).startswith("127.")]
    if local and len(names) > 1:
        raise UserError(f"{what}: {label(local[0])} names each host itself (the rendezvous is on the first host, "
                        "which every other must reach): give names or addresses the hosts reach each other by")
    seen = {}
    for h in names:
        first = seen.setdefault(host_key(h), h)
        if first is not h:
            twice = f"{label(h)} twice" if first == h else f"{label(first)} and {label(h)}, one host"
            raise UserError(f"{what} names {twice} (one agent per host)")
    return names


def host_key(host):
    """What tells two hosts apart: the host without its user@; a name without case or a trailing dot (DNS); an IPv4
    address in the one form its every spelling means (10.1 and 010.0.0.1 are spellings inet_aton, and so ssh,
    reads). Names are not looked up: a name and its address count as two hosts."""
    name = rdzv_host(host).rstrip(".").lower()
    if re.fullmatch(r"[0-9a-fx.]+", name):
        try:
            return socket.inet_ntoa(socket.inet_aton(name))
        except OSError:
            pass
    return name


def ssh_words(template, host):
    """The ssh command for host: the template's words, {host} replaced inside them (a host is one word, never
    parsed by a shell here)."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise UserError(f"--ssh-command {shown(repr(template), 80)}: {exc}") from None
    if not any("{host}" in w for w in words):
        raise UserError(f"--ssh-command {shown(repr(template), 80)} has no {{host}}")
    return [w.replace("{host}", host) for w in words]


def rdzv_host(host):
    return host.rpartition("@")[2]


def rdzv_port(run_id):
    return PORTS[0] + zlib.crc32(run_id.encode()) % PORTS[1]


FORWARDED = ("NCCL_", "GLOO_", "TORCH_", "COMMBENCH_", "UCX_", "MPIR_CVAR_", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
PER_NODE = ("COMMBENCH_STATUS_DIR", "COMMBENCH_LOCAL_ADDR", "COMMBENCH_RECORD_NODE")


def forwarded_env(spec):
    """What a node's agent gets of this environment (ssh starts it with its own): the NCCL/Gloo/torch/UCX/MPICH
    settings (the prefixes a record's env keeps) and commbench's, as srun and mpirun -x pass them, the catalogue's
    variables (CUDA_DEVICE_MAX_CONNECTIONS, ...) and those a spec's check named (envvars.NAMED_ENV); the launch's
    own env on top. They travel as JSON on ssh's stdin and reach torchrun as its environment: no shell reads a value
    on either side."""
    names = envvars.launch_names(os.environ)
    env = {k: v for k, v in os.environ.items() if (k.startswith(FORWARDED) or k in names) and k not in PER_NODE}
    return {**env, **spec.env}


def commands(spec, plan, plan_file):
    """[(argv, env)]: one link per LINK_HOSTS hosts (a dry run shows the first link, with SHOWN_NODES hosts)."""
    remote = shlex.join([sys.executable, "-m", "commbench.launch.ssh"])
    spec_fields = {**spec.__dict__, "env": {}, "notes": [], "hosts": [], "dry_run": False}   # no host list there
    orders = {"spec": spec_fields, "endpoint": f"{rdzv_host(spec.hosts[0])}:{rdzv_port(plan.run_id)}",
              "run_id": plan.run_id, "env": forwarded_env(spec)}
    hosts = spec.hosts[:SHOWN_NODES] if spec.dry_run else spec.hosts
    out = []
    for start in range(0, len(hosts), LINK_HOSTS):
        link = {"hosts": hosts[start:start + LINK_HOSTS], "first": start == 0, "ssh": shlex.split(spec.ssh_command),
                "remote": remote, "orders": orders, "plan_file": plan_file}
        out.append(([sys.executable, "-m", "commbench.launch.ssh", "link", json.dumps(link, separators=(",", ":"))],
                    {}))
    return out


# --- link: this machine, one per LINK_HOSTS hosts -------------------------------------------------------------

class Ssh:
    """One host's ssh, driven by its link: what is left to write on its stdin, its output's unfinished lines."""

    def __init__(self, host, argv, data):
        from benchcore.processes import procs
        self.host, self.data, self.ready, self.last = host, data, False, ""
        self.proc = procs.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pending = {self.proc.stdout: b"", self.proc.stderr: b""}
        os.set_blocking(self.proc.stdin.fileno(), False)

    @property
    def connecting(self):
        return not self.ready and self.proc.returncode is None

    def write(self):
        """Write what the pipe takes now of the orders and plan; True when all of it is written."""
        try:
            self.data = self.data[os.write(self.proc.stdin.fileno(), self.data):]
        except BlockingIOError:
            pass
        except OSError:   # ssh ended: its exit status says why
            self.data = b""
        return not self.data

    def hang_up(self):
        """Close ssh's stdin: the node agent stops everything of its own and ends, then ssh ends."""
        self.data = b""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()


class Link:
    """The ssh of each of a link's hosts, FANOUT connecting at once, in one selector loop: their orders and the
    plan written, their records and rank status read, their stderr relayed; all hung up when one host's ssh fails
    (here or at another link: FAILED_MARK) or SIGTERM comes."""

    def __init__(self, desc):
        self.desc, self.codes, self.stopped, self.deadline = desc, {}, None, None
        self.logdir = Path(os.environ["COMMBENCH_STATUS_DIR"]) if "COMMBENCH_STATUS_DIR" in os.environ else None
        self.plan = Path(desc["plan_file"]).read_bytes()
        self.waiting, self.live = list(enumerate(desc["hosts"])), {}
        self.sel = selectors.DefaultSelector()
        self.channel = (open_append(self.logdir / CHANNEL, "record channel") if self.logdir and desc["first"]
                        else None)

    def start(self, i, host):
        orders = {**self.desc["orders"], "first": self.desc["first"] and i == 0, "plan_bytes": len(self.plan)}
        argv = [w.replace("{host}", host) for w in self.desc["ssh"]] + [self.desc["remote"]]
        ssh = Ssh(host, argv, json.dumps(orders).encode() + b"\n" + self.plan)
        self.live[ssh.proc.pid] = ssh
        self.sel.register(ssh.proc.stdout, selectors.EVENT_READ, (ssh, self.stdout_line))
        self.sel.register(ssh.proc.stderr, selectors.EVENT_READ, (ssh, self.stderr_line))
        if not ssh.write():
            self.sel.register(ssh.proc.stdin, selectors.EVENT_WRITE, (ssh, None))

    def stdout_line(self, ssh, line):
        if line == b"ready":
            ssh.ready = True
        elif line.startswith(b"S {") and self.logdir:   # a rank's status there: the launch's progress here
            _status_here(self.logdir, line[2:])
        elif line.startswith(b"{") and self.channel and ssh.host == self.desc["hosts"][0]:
            self.channel.write(line.decode(errors="replace") + "\n")
            self.channel.flush()

    def stderr_line(self, ssh, line):
        """ssh's stderr (the node agent's and torchrun's output) to ours, its last line kept."""
        sys.stderr.buffer.write(line + b"\n")
        sys.stderr.flush()
        if line.strip():
            ssh.last = line.decode(errors="replace").strip()

    def run(self):
        """Until every started ssh ended: this link's exit status (1 where a host's ssh failed, here or at another
        link: the run failed; 143 on SIGTERM; EXIT_HANG where a host's rank reported a hang, whichever host ended
        first; else the first failing host's in the host list's order)."""
        signal.signal(signal.SIGTERM, lambda *_: self.stop(128 + signal.SIGTERM))
        while self.live or (self.waiting and self.stopped is None):
            while self.waiting and self.stopped is None and sum(s.connecting for s in self.live.values()) < FANOUT:
                self.start(*self.waiting.pop(0))
            for key, _ in self.sel.select(0.2):
                self.event(key)
            late = self.deadline is not None and time.monotonic() > self.deadline
            for ssh in list(self.live.values()):
                if ssh.proc.poll() is None and late:
                    ssh.proc.kill()
                elif ssh.proc.returncode is not None and (late or ssh.proc.stdout.closed and ssh.proc.stderr.closed):
                    self.ended(ssh)
            if self.stopped is None and self.logdir and (self.logdir / FAILED_MARK).exists():
                self.stop(1)   # another host's ssh failed: this launch cannot go on
        codes = [self.codes[host] for host in self.desc["hosts"] if host in self.codes]
        return self.stopped or (EXIT_HANG if EXIT_HANG in codes else next((c for c in codes if c), 0))

    def event(self, key):
        """A stream of a host's ssh is ready: write its stdin, or read its stdout or stderr up to whole lines."""
        ssh, on_line = key.data
        stream = key.fileobj
        if on_line is None:
            if ssh.write():
                self.sel.unregister(stream)
            return
        data = os.read(stream.fileno(), 1 << 16)
        if data:
            *lines, rest = (ssh.pending[stream] + data).split(b"\n")
            ssh.pending[stream] = rest if len(rest) <= MAX_HEADER else b""   # past any record's size: dropped
        else:
            lines = [ssh.pending[stream]] if ssh.pending[stream] else []
            self.close(stream)
        for line in lines:
            on_line(ssh, line)

    def close(self, stream):
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(stream)
        stream.close()

    def ended(self, ssh):
        """One host's ssh ended: a failure of ssh itself (exit 255: refused, lost) named, and the other links
        told."""
        code = self.codes[ssh.host] = ssh.proc.wait()
        del self.live[ssh.proc.pid]
        for stream in (ssh.proc.stdin, ssh.proc.stdout, ssh.proc.stderr):
            with contextlib.suppress(OSError):
                self.close(stream)
        if code != SSH_FAILED or self.stopped is not None:   # the first failure is named; it stops the launch
            return
        why = shown(ssh.last or "no message", 200)
        line = (f"host {ssh.host} was lost during the run (ssh exit 255): {why}" if ssh.ready else
                f"host {ssh.host} refuses ssh (exit 255): {why}")
        print(f"commbench-ssh: {line}", file=sys.stderr, flush=True)
        if self.logdir:
            with open_append(self.logdir / FAILED_MARK, "ssh failure mark") as f:
                f.write(ssh.host + "\n")
        self.stop(1)

    def stop(self, code):
        """Hang up every host (the hosts not started never will be); killed past LINK_GRACE_S (a host that no
        longer answers)."""
        if self.stopped is None:
            self.stopped, self.deadline = code, time.monotonic() + LINK_GRACE_S
            for ssh in self.live.values():
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(ssh.proc.stdin)
                ssh.hang_up()


def link(desc):
    """Run the ssh of each of desc's hosts; this process's exit status."""
    return Link(desc).run()


def _status_here(logdir, data):

    """A remote rank's status file, kept under the launch directory's REMOTE_STATUS (execute reads its progress
    there; its pid is the host's, never acted on here)."""
    try:
        rank = int(json.loads(data)["rank"])
    except (ValueError, KeyError, TypeError):
        return
    (logdir / REMOTE_STATUS).mkdir(exist_ok=True)
    replace_text(logdir / REMOTE_STATUS / f"rank{rank}.json", data.decode(errors="replace"))


# --- node: on each host ---------------------------------------------------------------------------------------

def node():
    """One host's agent: orders and plan from stdin, torchrun until it ends or stdin does; its exit status."""
    from benchcore.files import write_new
    from benchcore.processes import procs
    from commbench.launch.liveness import STATUS_ENV
    from commbench.launch.torchrun import agent_argv, node_env, split_endpoint

    stdin = sys.stdin.buffer
    orders = json.loads(stdin.readline(MAX_HEADER))
    size = int(orders["plan_bytes"])
    if not 0 < size <= MAX_PLAN:
        raise SystemExit(f"commbench-ssh: plan of {size} bytes")
    plan = stdin.read(size)
    spec = SimpleNamespace(**{**orders["spec"], "env": orders["env"]})   # the LaunchSpec's fields
    work = tempfile.mkdtemp(prefix="commbench-ssh-")   # 0700, this host's: plan, status files, channel
    try:
        plan_file = write_new(os.path.join(work, "plan.json"), lambda f: f.write(plan), "plan file", binary=True)
        env, local = node_env(spec, split_endpoint(orders["endpoint"])[0], orders["first"])
        argv = agent_argv(spec, orders["endpoint"], orders["run_id"], orders["first"], local, plan_file)
        agent = procs.spawn(argv, env={**os.environ, **env, STATUS_ENV: work, "TMPDIR": work}, stdout=2, stderr=2)
        print("ready", flush=True)
        code = _follow(agent, stdin, Path(work), procs)
        hung = any(st.get("exit") == EXIT_HANG for st in _statuses(Path(work)))
        return EXIT_HANG if hung else code
    finally:
        import shutil
        shutil.rmtree(work, ignore_errors=True)


def _follow(agent, stdin, work, procs):
    """Print the channel's records until torchrun ends (its exit status) or stdin ends (everything stopped)."""
    from commbench.launch.liveness import WORKER_NAME
    offset, sent, eof = 0, {}, False
    while True:
        done = agent.poll() is not None
        if not eof and select.select([stdin], [], [], 0.2)[0]:
            eof = not os.read(stdin.fileno(), 1 << 16)
        elif eof or done:
            time.sleep(0.0 if done else 0.2)
        offset = _forward(work / CHANNEL, offset)
        _forward_status(work, sent)
        if done:
            return agent.returncode
        if eof:
            workers = [st.get("pid") for st in _statuses(work)]
            procs.stop(agent, grace=2)
            for pid in workers:   # torchrun starts each in a session of its own
                if pid and procs.proc_name(pid) == WORKER_NAME:
                    procs.kill(pid, signal.SIGKILL)
            _forward(work / CHANNEL, offset)
            return 128 + signal.SIGTERM


def _forward_status(work, sent):
    """Each rank status file here that changed, as one 'S {...}' line on stdout (the launcher's progress)."""
    for f in work.glob("rank*.json"):
        try:
            text = json.dumps(json.loads(f.read_text()), separators=(",", ":"))
        except (OSError, ValueError):
            continue
        if text and sent.get(f.name) != text:
            sent[f.name] = text
            try:
                sys.stdout.write(f"S {text}\n")
                sys.stdout.flush()
            except BrokenPipeError:
                pass


def _statuses(work):
    out = []
    for f in work.glob("rank*.json"):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    return out


def _forward(path, offset):
    """Complete lines of the channel past offset to stdout; the new offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return offset
    end = data.rfind(b"\n") + 1
    if end:
        try:
            sys.stdout.buffer.write(data[:end])
            sys.stdout.flush()
        except BrokenPipeError:   # the link is gone: stdin ends too, and everything stops
            pass
    return offset + end


if __name__ == "__main__":
    if sys.argv[1:2] == ["link"]:
        sys.exit(link(json.loads(sys.argv[2])))
    try:
        sys.exit(node())
    except UserError as exc:   # no route to the rendezvous host from here, ...: one line, naming this host
        print(f"commbench-ssh: on {socket.gethostname()}: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
