"""What an acceptance spec adds around the suite's own options, checked as hostile input: the cluster (an exec
prefix each node's command starts with, and node 0's rendezvous endpoint) and a check's environment variables
(`commbench env`'s catalogue; a variable naming a library or file NCCL loads or writes only with allow_paths: true;
others only with allow_unknown_env: true; the test hooks never), and a check's expect: what NCCL must report it
ran (algo, proto, gdr, net, nvls, collnet), judged on the records' effective blocks."""
import shlex

from benchcore import inputs
from benchcore.errors import UserError, shown
from benchcore.results import thresholds
from commbench.commands.accept.kinds import is_argument
from commbench.evidence import nccl as nccl_evidence
from commbench.transports import envvars

CLUSTER = ("exec", "rdzv_endpoint")
# what str.format raises for a hole other than {node}, as the one line a user reads
FORMAT_ERRORS = {KeyError: "names a hole other than {node}", IndexError: "has a {} or {0} hole (only {node})",
                 ValueError: "has a lone { or } (write {{ or }} for a literal one)",
                 AttributeError: "has a hole other than {node}", TypeError: "has a hole other than {node}"}


def check_cluster(cluster, data, fail):
    """cluster: exec (a prefix with {node}, split as a shell would) and rdzv_endpoint HOST:PORT."""
    if not isinstance(cluster, dict):
        fail(data, "cluster", "cluster is a mapping of exec and rdzv_endpoint")
    for key in cluster:
        if key not in CLUSTER:
            fail(cluster, key, f"unknown key {inputs.key(key)} in cluster (known: {', '.join(CLUSTER)})")
    for key in CLUSTER:
        if not isinstance(cluster.get(key), str) or not cluster[key].strip() or "\0" in cluster[key]:
            fail(cluster, key if key in cluster else None, f"cluster needs {key} (text)")
    if "{node}" not in cluster["exec"]:
        fail(cluster, "exec", "cluster exec must contain {node} (where each node's number goes)")
    try:
        words = shlex.split(cluster["exec"].format(node=0))
    except tuple(FORMAT_ERRORS) as exc:
        why = FORMAT_ERRORS[type(exc)] if not isinstance(exc, ValueError) or "{" in str(exc) or "}" in str(exc) \
            else f"does not split into words ({str(exc).lower()})"
        fail(cluster, "exec", f"cluster exec {why}")
    if not words:
        fail(cluster, "exec", "cluster exec names no program")
    host, _, port = cluster["rdzv_endpoint"].rpartition(":")
    if not is_argument(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        fail(cluster, "rdzv_endpoint", "rdzv_endpoint is HOST:PORT (port 1-65535)")


def check_env(env, allow_unknown, allow_paths, fail):
    """A check's env as {name: text}: names and values as `commbench env`'s catalogue allows (sweep --env's
    rule); a variable whose value is a library or file path (NCCL_NET_PLUGIN, NCCL_TOPO_FILE, ...) only with
    allow_paths: true, any other variable (LD_PRELOAD, PYTHONPATH, ...) only with allow_unknown_env: true."""
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float)) and
                                            not isinstance(v, bool) for k, v in env.items()):
        fail("env is a mapping of variable names to values")
    for key, value in env.items():
        try:
            envvars.validate(key, [str(value)], allow_unknown, "allow_unknown_env: true")
        except UserError as exc:
            fail(f"env: {exc}")
        if is_path(key) and not (allow_paths or allow_unknown):
            fail(f"env: {key}={shown(str(value), 60)} names a library or file NCCL loads or writes: only with "
                 "allow_paths: true")
    return {k: str(v) for k, v in env.items()}


def is_path(name):
    var = envvars.CATALOGUE.get(name)
    return bool(var and var.path)


# expect: requirements on what NCCL reports it ran (commbench/evidence/nccl.py), judged on the check's records:
# key -> (the values it takes, the effective block's value a record is compared with)
def _algos(eff):
    return sorted({c["algo"] for c in eff.get("choices") or ()}) or None


def _nvls(eff):
    ch = (eff.get("channels") or {}).get("nvls")
    if eff.get("nvls_multicast") is None and ch is None:
        return None
    return "on" if eff.get("nvls_multicast") is True and ch not in (0, None) else "off"


def _collnet(eff):
    state = eff.get("collnet")
    return None if state is None else "connected" if state == "connected" else "disabled"


EXPECT = {
    "algo": (nccl_evidence.ALGOS, _algos),
    "proto": (nccl_evidence.PROTOS, lambda e: sorted({c["proto"] for c in e.get("choices") or ()}) or None),
    "gdr": (("all", "some", "none"), lambda e: e.get("gdr")),
    "net": (None, lambda e: e.get("net")),                                 # IB, Socket or a plugin's name
    "nvls": (("on", "off"), _nvls),
    "collnet": (("connected", "disabled"), _collnet),
}


def check_expect(expect, fail):
    """A check's expect: {key: value} of EXPECT's keys, values as NCCL spells them (case aside)."""
    if not isinstance(expect, dict) or not expect:
        fail("expect is a mapping such as {algo: NVLS, gdr: all, net: IB}")
    out = {}
    for key, value in expect.items():
        if key not in EXPECT:
            fail(f"expect: unknown key {inputs.key(key)} (known: {', '.join(EXPECT)})")
        values = EXPECT[key][0]
        if not isinstance(value, str) or not value.strip() or len(value) > 64:
            fail(f"expect: {key} is a name (text)")
        match = [v for v in values or () if v.lower() == value.strip().lower()]
        if values and not match:
            fail(f"expect: {key} is {shown(value, 40)}, expected one of {', '.join(values)}")
        out[key] = match[0] if match else value.strip()
    return out


def expect_outcome(expect, records):
    """The Outcome of a check's expect on its records: every measurement shows each expected value in its
    effective block; one that shows another, or nothing (no NCCL evidence), misses it."""
    threshold = thresholds.Threshold("expect " + ", ".join(f"{k}: {v}" for k, v in expect.items()))
    measured = [r for r in records if not r.get("event")]
    missed, why = [], []
    for rec in measured:
        eff = rec.get("effective") or {}
        for key, want in expect.items():
            got = EXPECT[key][1](eff) if eff.get("transport") == "nccl" else None
            ok = got is not None and (all(g.lower() == want.lower() for g in got) if isinstance(got, list) else
                                      got.lower().startswith(want.lower()) if key == "net" else got == want)
            if not ok:
                missed.append(rec)
                why.append(f"{key} {'not shown' if got is None else '/'.join(got) if isinstance(got, list) else got}"
                           f" where {want} is expected ({rec.get('collective')} {rec.get('size_bytes')} B)")
                break
    if not measured:
        return thresholds.Outcome(threshold, False, message="not judged: no measurement")
    message = (f"{len(missed)} of {len(measured)} measurements: {why[0]}" if missed else
               f"every measurement's NCCL evidence shows {threshold.text[7:]}")
    return thresholds.Outcome(threshold, not missed, judged=len(measured), message=message, missed=missed)
