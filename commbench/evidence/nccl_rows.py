"""How each NCCL setting is proven from the effective block commbench/evidence/nccl.py reads: the judges of
applied.py's NCCL rows. Each takes (effective, requested value) and returns (status, evidence line or reason).

An absence (no P2P line, no CollNet connection) proves something only where NCCL's INIT output was read (its
channel-count line is there); otherwise the answer is unknown.
"""
APPLIED, NOT_APPLIED, UNKNOWN = "applied", "not applied", "unknown"
_OFF = {"0", "false", "no", "off", "disable", "disabled"}


def _line(eff, field, default=""):
    return (eff.get("lines") or {}).get(field, default)


def _names(value):
    """(exclude, exact, names) of an NCCL list (NCCL_ALGO, NCCL_IB_HCA...: '^' excludes, '=' matches exactly)."""
    value = value.strip()
    exclude = value.startswith("^")
    value = value.lstrip("^")
    exact = value.startswith("=")
    return exclude, exact, [v.strip() for v in value.lstrip("=").split(",") if v.strip()]


def _choice_rule(field, canon):
    def judge(eff, value):
        if ":" in value or ";" in value:
            return UNKNOWN, f"the per-collective form of {value!r} is not judged"
        choices = eff.get("choices")
        if not choices:
            return UNKNOWN, "no TUNING line: NCCL prints the choice per collective only from 2.20, with " \
                            "NCCL_DEBUG_SUBSYS=TUNING, on rank 0"
        exclude, _, names = _names(value)
        wanted = {canon(n) for n in names}
        used = sorted({c[field] for c in choices})
        bad = [u for u in used if canon(u) in wanted] if exclude else [u for u in used if canon(u) not in wanted]
        if bad:
            c = next(c for c in choices if c[field] in bad)
            return NOT_APPLIED, f"{c['collective'] or 'a collective'} at {c['size_bytes'][0]} bytes ran " \
                                f"{c['algo']}/{c['proto']}"
        return APPLIED, f"every TUNING choice is {'/'.join(used)}: {_line(eff, 'choices')}"
    return judge


def _canon(name):
    return name.upper().replace("_", "")


judge_algo = _choice_rule("algo", _canon)
judge_proto = _choice_rule("proto", _canon)


def _coll_channels(eff):
    ch = (eff.get("channels") or {}).get("coll")
    return (ch, ch) if isinstance(ch, int) else tuple(ch) if ch else (None, None)


def judge_min_channels(eff, value):
    lo, _ = _coll_channels(eff)
    if lo is None or not value.strip().isdigit():
        return UNKNOWN, "no channel-count line (NCCL_DEBUG_SUBSYS INIT)" if lo is None else f"{value!r} is no number"
    ok = lo >= int(value)
    return (APPLIED if ok else NOT_APPLIED), f"{lo} coll channels ({'>=' if ok else '<'} {value}): " \
                                             f"{_line(eff, 'channels')}"


def judge_max_channels(eff, value):
    _, hi = _coll_channels(eff)
    if hi is None or not value.strip().isdigit():
        return UNKNOWN, "no channel-count line (NCCL_DEBUG_SUBSYS INIT)" if hi is None else f"{value!r} is no number"
    ok = hi <= int(value)
    return (APPLIED if ok else NOT_APPLIED), f"{hi} coll channels ({'<=' if ok else '>'} {value}): " \
                                             f"{_line(eff, 'channels')}"


def _gdr(field):
    def judge(eff, value):
        gdr = eff.get(field)
        if gdr is None:
            return UNKNOWN, "no NET channel line (a run within one node, or NCCL_DEBUG_SUBSYS without INIT/NET)"
        off = value.strip().upper() in {"LOC", "0"}
        seen = _line(eff, "gdr") if gdr != "none" else _line(eff, "no gdr")
        if off:
            return (APPLIED if gdr == "none" else NOT_APPLIED), f"GDRDMA on {gdr} channels: {seen}"
        return (APPLIED if gdr == "all" else NOT_APPLIED), f"GDRDMA on {gdr} channels: {seen}"
    return judge


judge_gdr_level = _gdr("gdr")
judge_gdr_read = _gdr("gdr_send")


def judge_nvls(eff, value):
    nvls = (eff.get("channels") or {}).get("nvls")
    if nvls is None:
        return UNKNOWN, "no channel-count line (NCCL_DEBUG_SUBSYS INIT)"
    on = nvls != 0 and nvls != [0, 0]
    want = value.strip().lower() not in _OFF
    why = _line(eff, "channels") if on or not _line(eff, "nvls_multicast") else _line(eff, "nvls_multicast")
    return (APPLIED if on == want else NOT_APPLIED), f"{nvls} nvls channels: {why}"


def judge_collnet(eff, value):
    state = eff.get("collnet")
    want = value.strip().lower() not in _OFF
    if state is None:
        if not want and "channels" in eff:
            return APPLIED, "no CollNet connection in NCCL's INIT output"
        return UNKNOWN, "NCCL said nothing of CollNet (needs NCCL_DEBUG_SUBSYS INIT and a CollNet plugin)"
    connected = state == "connected"
    return (APPLIED if connected == want else NOT_APPLIED), _line(eff, "collnet", state)


def _match(names, exact, nic):
    return any(nic == n if exact else nic.startswith(n) for n in names)


def judge_ib_hca(eff, value):
    if eff.get("net") and "IB" not in eff["net"]:
        return NOT_APPLIED, f"NCCL used network {eff['net']}: {_line(eff, 'net')}"
    nics = eff.get("nics") if eff.get("nics_of") == "IB" else None
    if not nics:
        return UNKNOWN, "no 'NET/IB : Using' line"
    exclude, exact, names = _names(value)
    names = [n.split(":")[0] for n in names]
    devs = [n.split(":")[0] for n in nics]
    bad = [d for d in devs if _match(names, exact, d) == exclude]
    return (NOT_APPLIED if bad else APPLIED), _line(eff, "nics")


def judge_socket_ifname(eff, value):
    nics = eff.get("nics") if eff.get("nics_of") == "Socket" else None
    ifs = [n.split(":")[0] for n in nics] if nics else [eff["bootstrap_if"]] if eff.get("bootstrap_if") else []
    if not ifs:
        return UNKNOWN, "no 'NET/Socket : Using' or 'Bootstrap : Using' line"
    exclude, exact, names = _names(value)
    bad = [i for i in ifs if _match(names, exact, i) == exclude]
    return (NOT_APPLIED if bad else APPLIED), _line(eff, "nics" if nics else "bootstrap_if")


def _transport_off(prefix, what):
    def judge(eff, value):
        seen = {k: n for k, n in (eff.get("transports") or {}).items() if k.startswith(prefix)}
        off = value.strip().lower() not in _OFF
        if seen:
            kind = next(iter(seen))
            return (NOT_APPLIED if off else APPLIED), _line(eff, f"via {kind}")
        if not eff.get("transports"):
            return UNKNOWN, "no connection line (NCCL_DEBUG_SUBSYS INIT)"
        return (APPLIED if off else UNKNOWN), f"no {what} connection among {sorted(eff['transports'])}"
    return judge


judge_p2p_disable = _transport_off("P2P", "P2P")
judge_shm_disable = _transport_off("SHM", "SHM")


def judge_net(eff, value):
    net = eff.get("net")
    if not net:
        return UNKNOWN, "no 'Using network' line"
    return (APPLIED if net.lower() == value.strip().lower() else NOT_APPLIED), _line(eff, "net", f"network {net}")


def judge_net_plugin(eff, value):
    net, plugin = eff.get("net"), eff.get("net_plugin")
    if not net:
        return UNKNOWN, "no 'Using network' line"
    if value.strip().lower() in {"none", ""}:
        return (APPLIED if not plugin else NOT_APPLIED), _line(eff, "net")
    if plugin and net in (plugin, plugin.split()[0]) or net not in ("IB", "Socket"):
        return APPLIED, f"{_line(eff, 'net_plugin', plugin or '')} / {_line(eff, 'net')}"
    return NOT_APPLIED, f"NCCL fell back to its own network: {_line(eff, 'net')}"
