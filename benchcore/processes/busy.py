"""How busy this host was while a run measured: the load average at its start and end, and the share of the host's
CPU time that processes other than the run's own took meanwhile (/proc/stat's busy time minus the run's: this process
and its waited-for children, so ranks, agents and fio count as the run's). A figure measured beside others' work is
said so where it is printed (and kept in the records), never passed off as the machine's."""
import os
import time

BUSY_FIELDS = (1, 2, 3, 6, 7, 8)   # /proc/stat cpu: user nice system [idle iowait] irq softirq steal (proc(5))
OTHERS_BUSY = 0.10                 # others took over a tenth of the CPUs: the line says the times may be inflated


def _busy_s():
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return sum(int(fields[i]) for i in BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")


def host_busy_s():
    """Seconds of CPU time this host's CPUs spent busy since boot (every process's, the kernel's)."""
    return _busy_s()


def host_key():
    """A number the same for every process on this host's kernel (network namespaces too), different elsewhere: the
    first 48 bits of the boot id (exact in a float64, so ranks can gather it with their times)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return float(int(f.read().strip().replace("-", "")[:12], 16))
    except (OSError, ValueError):
        return -1.0


def others_fraction(host_busy, own, wall, cpus=None):
    """The share of the host's CPU time, over wall seconds, that was busy and not own (seconds); None where unknown."""
    cpus = cpus or os.cpu_count() or 1
    if host_busy is None or wall <= 0:
        return None
    return round(min(1.0, max(0.0, (host_busy - own) / (wall * cpus))), 3)


def _own_s():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Busy:
    """with Busy() as busy: ... ; busy.fields: load_start, load_end, cpus, others_cpu_fraction (None where /proc
    cannot tell)."""

    def __enter__(self):
        self.load_start, self.started = os.getloadavg()[0], time.monotonic()
        try:
            self.busy, self.own = _busy_s(), _own_s()
        except (OSError, ValueError, IndexError):
            self.busy = None
        return self

    def __exit__(self, *exc):
        self.wall = time.monotonic() - self.started
        self.load_end, self.cpus = os.getloadavg()[0], os.cpu_count() or 1
        self.others = None
        if self.busy is not None:
            try:
                self.busy_after, self.own_after = _busy_s(), _own_s()
                self.others = others_fraction(self.busy_after - self.busy, self.own_after - self.own, self.wall,
                                              self.cpus)
            except (OSError, ValueError, IndexError):
                pass
        return False

    @property
    def fields(self):
        return {"load_start": round(self.load_start, 2), "load_end": round(self.load_end, 2), "cpus": self.cpus,
                "others_cpu_fraction": self.others}


def busy_line(fields):
    """'this host: load 5.44 -> 6.10 on 2 CPUs; other processes took 38 % of the CPUs while it measured: times may
    be inflated' (the warning only where others took over OTHERS_BUSY)."""
    others = fields.get("others_cpu_fraction")
    line = (f"this host: load {fields['load_start']:.2f} -> {fields['load_end']:.2f} on {fields['cpus']} CPU"
            f"{'s' * (fields['cpus'] != 1)}; ")
    if others is None:
        return line + "what other processes took is not known (/proc/stat unreadable)"
    line += f"other processes took {others:.0%} of the CPUs while it measured"
    return line + (": times may be inflated, rerun on a quiet machine to trust them" if others > OTHERS_BUSY else "")
