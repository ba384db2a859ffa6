"""scripts/slurm and scripts/k8s: the files parse (sbatch directives, bash syntax, Kubernetes kinds) and every
option their commbench/iobench commands use is one the CLI's --help lists."""
import re
import subprocess

import pytest
import yaml

from tests.commbench.commands.test_accept import help_options
from tests.conftest import ROOT

SCRIPTS = ROOT / "scripts"
# file -> the tool its command runs
TEMPLATES = {"slurm/commbench.sbatch": "commbench", "slurm/iobench.sbatch": "iobench",
             "slurm/accept.sbatch": "commbench", "k8s/commbench-pytorchjob.yaml": "commbench",
             "k8s/iobench-job.yaml": "iobench"}
SCRIPTS_RUN = {"slurm/healthcheck"}   # run as they are (tests/slurm/test_slurm.py), not templates to submit


def test_every_template_is_listed():
    found = {str(p.relative_to(SCRIPTS)) for d in ("slurm", "k8s") for p in (SCRIPTS / d).iterdir()}
    assert found == set(TEMPLATES) | SCRIPTS_RUN
    for name in SCRIPTS_RUN:
        assert subprocess.run(["bash", "-n", str(SCRIPTS / name)], capture_output=True, timeout=30).returncode == 0


def command_text(name):
    """(subcommand, the rest of the command line) of the tool's command in a template."""
    path = SCRIPTS / name
    if name.endswith(".sbatch"):
        m = re.search(r'exec "\$\w+" (\w+)(.*?)(?:\n\'|\Z)', path.read_text(), re.S)
    else:
        doc = yaml.safe_load(path.read_text())
        pod = (doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"] if doc["kind"] == "PyTorchJob"
               else doc["spec"]["template"])
        m = re.search(r"exec \w+ (\w+)(.*)", pod["spec"]["containers"][0]["args"][0], re.S)
    assert m, name
    default_args = re.search(r"^ARGS=\$\{ARGS:-(.*)\}$", path.read_text(), re.M)  # the options ARGS replaces
    rest = m.group(2) + (" " + default_args.group(1) if default_args else "")
    return m.group(1), re.sub(r"\$\([^)]*\)", "", rest)   # $(hostname -s): another program's options


@pytest.mark.parametrize("name", [n for n in TEMPLATES if n.endswith(".sbatch")])
def test_sbatch_templates_have_their_directives_and_parse(name):
    path = SCRIPTS / name
    text = path.read_text()
    assert text.startswith("#!/bin/bash\n")
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?", text, re.M))
    assert {"job-name", "nodes", "ntasks-per-node", "partition", "account", "time", "output"} <= set(directives)
    assert "no-requeue" in directives   # a node lost mid-run ends the job (tests/slurm), not a rerun under its id
    assert directives["ntasks-per-node"] == "1"          # one task per node
    assert re.search(r"^#SBATCH --partition=\S+\s+# EDIT", text, re.M)
    assert re.search(r"^#SBATCH --account=\S+\s+# EDIT", text, re.M)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, timeout=30).returncode == 0


def test_commbench_sbatch_runs_commbench_once_and_the_launcher_takes_the_allocation():
    """No node options: inside the allocation commbench's Slurm launcher has srun start one torchrun per node (run
    for real in tests/slurm/test_slurm.py); exec, so Slurm's SIGTERM reaches commbench."""
    sub, rest = command_text("slurm/commbench.sbatch")
    assert sub == "run" and not {"--nodes", "--node-rank", "--rdzv-endpoint", "--launcher"} & set(rest.split())
    assert "srun" not in (SCRIPTS / "slurm/commbench.sbatch").read_text().split("set -euo pipefail")[1]


def test_kubernetes_manifests_load_with_their_kinds():
    job = yaml.safe_load((SCRIPTS / "k8s/commbench-pytorchjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] >= 1
    for role in ("Master", "Worker"):
        assert specs[role]["template"]["spec"]["containers"][0]["name"] == "pytorch"
    io = yaml.safe_load((SCRIPTS / "k8s/iobench-job.yaml").read_text())
    assert (io["apiVersion"], io["kind"]) == ("batch/v1", "Job")
    pod = io["spec"]["template"]["spec"]
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == claim["name"])
    assert command_text("k8s/iobench-job.yaml")[1].split()[0] == mount["mountPath"]


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_every_option_a_template_uses_is_in_the_clis_help(name):
    sub, rest = command_text(name)
    used = set(re.findall(r"(?<![\w$-])(--?[A-Za-z][\w-]*)", rest))
    assert used, name
    have = help_options(TEMPLATES[name], sub)
    assert used <= have, (name, used - have)
