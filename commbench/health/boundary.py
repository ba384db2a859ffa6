"""Where the node's hardware is read: the pynvml module, the sysfs root and the kernel log. The tests replace each
at this boundary alone, with captured real outputs, where this machine lacks the hardware; the code behind it is the
same. The test hooks act only under COMMBENCH_TEST_HOOKS=1 (commbench.transports.envvars.hooks_on):

  COMMBENCH_TEST_PYNVML=FILE   a Python file loaded in place of pynvml (the tests' fake answers from captures)
  COMMBENCH_TEST_SYSFS=DIR     the root under which class/infiniband is read (instead of /sys)
  COMMBENCH_TEST_KMSG=FILE     the kernel log read for XIDs (instead of /dev/kmsg), lines as dmesg or kmsg print them

In each value, {node} stands for this host's name, so that every node of a cluster reads its own capture."""
import importlib.util
import os
import socket
from pathlib import Path

from commbench.transports.envvars import hooks_on

PYNVML_ENV, SYSFS_ENV, KMSG_ENV = "COMMBENCH_TEST_PYNVML", "COMMBENCH_TEST_SYSFS", "COMMBENCH_TEST_KMSG"
SYS, KMSG = Path("/sys"), Path("/dev/kmsg")


def _hook(name):
    value = os.environ.get(name, "") if hooks_on() else ""
    return value.replace("{node}", socket.gethostname()) if value else None


def pynvml():
    """The NVML binding: nvidia-ml-py's pynvml, or the tests' module (ImportError where neither loads)."""
    path = _hook(PYNVML_ENV)
    if path is None:
        import pynvml as module
        return module
    spec = importlib.util.spec_from_file_location("commbench_test_pynvml", path)
    if spec is None:
        raise ImportError(f"{PYNVML_ENV}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sys_root():
    return Path(_hook(SYSFS_ENV) or SYS)


def kernel_log():
    """(path, whether it is /dev/kmsg's record stream)."""
    path = _hook(KMSG_ENV)
    return (Path(path), False) if path else (KMSG, True)
