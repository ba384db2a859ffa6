"""scripts/slurm and scripts/k8s: the files parse (sbatch directives, bash syntax; the Kubernetes manifests against
the schemas of their kinds) and every option their commbench/iobench commands use is one the CLI's --help lists."""
import re
import subprocess

import kubernetes.client
import pytest
import yaml
from kubeflow.training import models as kubeflow_models

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


def command_texts(name):
    """[(subcommand, the rest of the command line)] of each of the tool's commands in a template; ARGS's default
    (the options ARGS replaces) goes with the last, the template's main command (iobench.sbatch: ckpt, after the
    MODEL form's model-ckpt)."""
    path = SCRIPTS / name
    if name.endswith(".sbatch"):
        found = re.findall(r'exec "\$\w+" ([\w-]+)(.*?)(?:\n\s*\'|\Z)', path.read_text(), re.S)
    else:
        doc = yaml.safe_load(path.read_text())
        pod = (doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"] if doc["kind"] == "PyTorchJob"
               else doc["spec"]["template"])
        found = re.findall(r"exec \w+ ([\w-]+)(.*)", pod["spec"]["containers"][0]["args"][0], re.S)
    assert found, name
    default_args = re.search(r"^ARGS=\$\{ARGS:-(.*)\}$", path.read_text(), re.M)
    found[-1] = (found[-1][0], found[-1][1] + (" " + default_args.group(1) if default_args else ""))
    return [(sub, re.sub(r"\$\([^)]*\)", "", rest)) for sub, rest in found]   # $(hostname -s): another program's


def command_text(name):
    """(subcommand, the rest of the command line) of a template's main command."""
    return command_texts(name)[-1]


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


PRIMITIVE = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
QUANTITY = (str, int, float)   # a resource limit or request: Kubernetes' Quantity is a number or a string


def as_schema(value, kind, path="", quantity=False):
    """A manifest's YAML value as the OpenAPI type `kind` of the SDKs generated from the schemas (Kubernetes'
    client for the core kinds, Kubeflow's training SDK for PyTorchJob, whose pod templates are Kubernetes' own).
    AssertionError naming the path of a field its kind does not have, a value of the wrong type, or a required
    field missing."""
    if kind.startswith("dict("):
        assert isinstance(value, dict), f"{path}: not a map ({kind})"
        return {k: as_schema(v, kind[kind.index(",") + 1:-1].strip(), f"{path}.{k}", quantity)
                for k, v in value.items()}
    if kind.startswith("list["):
        assert isinstance(value, list), f"{path}: not a list ({kind})"
        return [as_schema(v, kind[5:-1], f"{path}[{i}]") for i, v in enumerate(value)]
    if kind in PRIMITIVE:
        assert isinstance(value, QUANTITY if quantity else PRIMITIVE[kind]) and \
            not (isinstance(value, bool) and kind != "bool"), f"{path}: {value!r} is not {kind}"
        return value
    cls = getattr(kubeflow_models, kind, None) or getattr(kubernetes.client, kind)
    assert isinstance(value, dict), f"{path}: not an object ({kind})"
    field = {name: attr for attr, name in cls.attribute_map.items()}
    assert set(value) <= set(field), f"{path}: {kind} has no field {sorted(set(value) - set(field))}"
    try:   # the generated constructors refuse a required field that is missing, or a value outside its enum
        return cls(**{field[k]: as_schema(v, cls.openapi_types[field[k]], f"{path}.{k}",
                                          kind == "V1ResourceRequirements") for k, v in value.items()})
    except ValueError as exc:
        raise AssertionError(f"{path or kind}: {exc}") from None


MANIFESTS = {"k8s/commbench-pytorchjob.yaml": ("kubeflow.org/v1", "PyTorchJob", "KubeflowOrgV1PyTorchJob"),
             "k8s/iobench-job.yaml": ("batch/v1", "Job", "V1Job")}


@pytest.mark.parametrize("name", list(MANIFESTS))
def test_kubernetes_manifests_match_the_schemas_of_their_kinds(name):
    doc = yaml.safe_load((SCRIPTS / name).read_text())
    api, kind, schema = MANIFESTS[name]
    assert (doc["apiVersion"], doc["kind"]) == (api, kind)
    as_schema(doc, schema)


BROKEN = [  # (manifest, a change a user might make by mistake, what the check says)
    ("k8s/iobench-job.yaml", lambda d: d["spec"]["template"]["spec"].update(restartpolicy="Never"),
     "V1PodSpec has no field ['restartpolicy']"),
    ("k8s/iobench-job.yaml", lambda d: d["spec"].update(backoffLimit="0"), ".spec.backoffLimit: '0' is not int"),
    ("k8s/iobench-job.yaml", lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("name"),
     "Invalid value for `name`, must not be `None`"),
    ("k8s/commbench-pytorchjob.yaml", lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"].update(replica=2),
     "KubeflowOrgV1ReplicaSpec has no field ['replica']"),
    ("k8s/commbench-pytorchjob.yaml", lambda d: d["spec"]["runPolicy"].update(cleanPodPolicy=["Running"]),
     ".spec.runPolicy.cleanPodPolicy: ['Running'] is not str"),
]


@pytest.mark.parametrize("name, change, said", BROKEN)
def test_the_schema_check_refuses_a_misspelt_field_a_wrong_type_and_a_missing_name(name, change, said):
    doc = yaml.safe_load((SCRIPTS / name).read_text())
    change(doc)
    with pytest.raises(AssertionError, match=re.escape(said)):
        as_schema(doc, MANIFESTS[name][2])


def test_kubernetes_manifests_as_the_operator_and_the_volume_need():
    job = yaml.safe_load((SCRIPTS / "k8s/commbench-pytorchjob.yaml").read_text())
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] >= 1
    for role in ("Master", "Worker"):
        assert specs[role]["template"]["spec"]["containers"][0]["name"] == "pytorch"
    io = yaml.safe_load((SCRIPTS / "k8s/iobench-job.yaml").read_text())
    pod = io["spec"]["template"]["spec"]
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == claim["name"])
    assert command_text("k8s/iobench-job.yaml")[1].split()[0] == mount["mountPath"]


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_every_option_a_template_uses_is_in_the_clis_help(name):
    for sub, rest in command_texts(name):
        used = set(re.findall(r"(?<![\w$-])(--?[A-Za-z][\w-]*)", rest))
        assert used, name
        have = help_options(TEMPLATES[name], sub)
        assert used <= have, (name, sub, used - have)


def test_accept_sbatch_passes_what_to_do_on_fail_error_and_pass_from_its_environment(tmp_path):
    """ON_FAIL, ON_ERROR and ON_PASS reach accept's --on-fail, --on-error and --on-pass (report by default): the
    template run as Slurm runs it, its program echo, which prints the command line it was given."""
    def command(**env):
        done = subprocess.run(["bash", str(SCRIPTS / "slurm/accept.sbatch"), "spec.yaml"], capture_output=True,
                              text=True, timeout=30, cwd=tmp_path,
                              env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "COMMBENCH": "/bin/echo", **env})
        assert done.returncode == 0, done.stderr
        return done.stdout.split()
    words = command()
    assert words[:3] == ["accept", "--spec", "spec.yaml"] and words[words.index("--out") + 1] == f"{tmp_path}/accept-7"
    assert [words[words.index(o) + 1] for o in ("--on-fail", "--on-error", "--on-pass")] == ["report"] * 3
    words = command(ON_FAIL="drain", ON_ERROR="drain", ON_PASS="resume", BASELINE="old.jsonl")
    assert [words[words.index(o) + 1] for o in ("--on-fail", "--on-error", "--on-pass", "--baseline")] == [
        "drain", "drain", "resume", "old.jsonl"]
