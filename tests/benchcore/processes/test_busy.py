"""benchcore/processes/busy.py: the share of the host's CPUs that others took while a run measured (the run's own
processes, waited-for children included, never count as others)."""
import subprocess
import sys

from benchcore.processes.busy import Busy, busy_line, host_busy_s, host_key, others_fraction


def test_a_child_s_work_is_the_run_s_own_not_another_process_s():
    with Busy() as busy:
        before = host_busy_s()
        subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
                        "while time.process_time() < end: pass"], check=True, timeout=120)
        seen = host_busy_s() - before
    assert seen >= 0.4                       # the host saw the child's half CPU-second (clock ticks: 10 ms)
    fields = busy.fields
    assert fields["cpus"] >= 1 and 0 <= fields["others_cpu_fraction"] <= 1
    own = busy.own_after - busy.own
    assert own >= 0.45                      # os.times counted the waited-for child as the run's own
    assert fields["others_cpu_fraction"] == others_fraction(busy.busy_after - busy.busy, own, busy.wall, busy.cpus)


def test_others_fraction_and_the_line_a_user_reads():
    assert others_fraction(3.0, 1.0, 2.0, 2) == 0.5        # 3 busy CPU-seconds, 1 of them ours, over 2 s x 2 CPUs
    assert others_fraction(1.0, 2.0, 2.0, 2) == 0.0        # never below 0 (ticks vs exact CPU time)
    assert others_fraction(None, 1.0, 2.0, 2) is None
    quiet = busy_line({"load_start": 0.1, "load_end": 0.2, "cpus": 2, "others_cpu_fraction": 0.03})
    assert quiet == "this host: load 0.10 -> 0.20 on 2 CPUs; other processes took 3% of the CPUs while it measured"
    busy = busy_line({"load_start": 5, "load_end": 6, "cpus": 2, "others_cpu_fraction": 0.38})
    assert "38% of the CPUs" in busy and "times may be inflated" in busy
    assert host_key() == host_key() and host_key() > 0
