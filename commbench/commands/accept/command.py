"""`commbench accept`: run a spec's checks (spec.py), judge their thresholds, and write results.jsonl,
junit.xml, report.md + report.html and verdict.json (outputs.py); --init writes a starting spec (init.py).

Each check is its own process (or one per node under a cluster exec prefix), so a check that crashes or
hangs past its timeout is a failed check with its reason and the others still run. Ctrl-C (or SIGTERM, as a
Slurm time limit sends) stops the running check, keeps what it measured and still writes every output (exit
130, 143).
Exit: 0 every check passed, 1 one failed, 2 the run could not be done (bad spec, --out not new, ...).
"""
import contextlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from benchcore.errors import UserError, given
from benchcore.files import write_new
from benchcore.inputs import name, shown
from benchcore.processes import procs
from benchcore.progress import Reporter, quiet_option
from benchcore.report.page import out_dir
from benchcore.report.render import console
from benchcore.results import metrics, thresholds
from benchcore.results.read import load_many
from benchcore.results.records import RecordWriter, new_run_id, read_records
from commbench.commands import history
from commbench.commands.accept import drain
from commbench.commands.accept.gates import expect_outcome, is_path
from commbench.commands.accept.init import init_text
from commbench.commands.accept.outputs import EXIT_FAIL, EXIT_PASS, Written, summary, verdict_event, write_outputs
from commbench.commands.accept.spec import Check, load_spec
from commbench.launch.ssh import DEFAULT_SSH, host_list
from commbench.transports import envvars
from commbench.transports.envvars import CATALOGUE
from iobench.cli import cli as iobench_cli

STOPS = (KeyboardInterrupt, SystemExit)   # Ctrl-C; SIGTERM, which benchcore.errors.run_cli makes SystemExit(143)


def stop_code(stop):
    """The exit code of an interrupted run: 130 after Ctrl-C, 143 after SIGTERM (a Slurm time limit)."""
    return 130 if isinstance(stop, KeyboardInterrupt) else stop.code if isinstance(stop.code, int) else 1
AFTER_FIRST_EXIT_S = 30     # a node still running this long after another failed is stopped


@dataclass
class Result:
    check: Check
    commands: list
    records: list = field(default_factory=list)
    reason: str = ""            # why the run failed ("" when it completed)
    seconds: float = 0.0
    ran: bool = True            # False: not started (interrupted before it)
    outcomes: list = field(default_factory=list)

    @property
    def passed(self):
        return self.ran and not self.reason and all(o.passed for o in self.outcomes)


def _env(check):
    return {**os.environ, **check.env, envvars.NAMED_ENV: ",".join(check.env)}   # the launch passes them on


def _reason(rc, stderr, node):
    lines = [" ".join(ln[len("error: "):].split()) for ln in stderr.splitlines() if ln.startswith("error: ")]
    lines = [ln for ln in lines if ln.strip("=")]
    last = next((ln for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    text = "; ".join(lines) or procs.one_line(last) or "no message"
    return f"{f'node {node}: ' if node is not None else ''}exit {rc}: {shown(text, 500)}"


def verdict_exit(check, rc, stderr):
    """Whether a command that judges itself (pairs) exited 1 for its verdict alone ('error: verdict: ...', its one
    error line): the check judges that verdict's record (own_verdict); the run itself did not fail."""
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    return bool(check.row.verdict) and rc == 1 and len(errors) == 1 and errors[0].startswith("error: verdict: ")


def validate(spec, programs):
    """Check every check that has --dry-run as its command's dry run would, in this process (programs: Kind.program
    -> its click group): its options parsed and its plan built by the command itself, nothing started (no
    process, no env of the spec, no cluster prefix). A value the command refuses is refused here, naming the
    spec's line; so is a cluster exec program that is not there."""
    if spec.cluster and any(spec.clustered(c) for c in spec.checks):
        program = shlex.split(spec.cluster["exec"].format(node=0))[0]
        if shutil.which(program) is None:
            raise UserError(f"{name(spec.path)}:{spec.exec_line}: cluster exec: no program {shown(program, 100)} "
                            "(not found, or not executable)")
    for i, check in enumerate(spec.checks):
        if not check.row.dry_run:
            continue
        args = check.args(None, *((0, spec.endpoint(i)) if spec.cluster and spec.clustered(check) else ()))  # node 0's
        args = args[:args.index("--format")] + (spec.host_args(check) if spec.hosts and spec.clustered(check) else [])
        args += ["--dry-run"]
        err, why = io.StringIO(), None
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = programs[check.row.program].main(args, check.row.tool, standalone_mode=False)
        except UserError as exc:
            why = str(exc)
        except click.ClickException as exc:
            why = exc.format_message()
        except SystemExit as exc:
            code = exc.code
        if why is None and code:
            why = _reason(code, err.getvalue(), None).split(": ", 1)[1]
        if why:
            raise UserError(f"{name(spec.path)}:{check.line}: check {shown(repr(check.name))}: {shown(why, 300)}")


def run_check(spec, index, directory, result):
    """Run one check to its end, its timeout, Ctrl-C or SIGTERM (re-raised after its records are in result);
    its records carry accept_check."""
    check = spec.checks[index]
    out = directory / f".check-{index}.jsonl"
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="commbench-accept-") as tmp:
        running = []
        try:
            for node, argv in spec.commands(check, index, str(out)):
                result.commands.append(shlex.join(argv))
                err = open(Path(tmp) / f"{len(running)}.err", "w+")
                try:
                    proc = procs.spawn(argv, env=_env(check), stdout=subprocess.DEVNULL, stderr=err)
                except OSError as exc:   # the cluster exec program went away since validate()
                    for _, p, _ in running:
                        procs.stop(p)
                    result.reason = f"node {node}: cannot start {shown(argv[0], 100)}: {exc.strerror}"
                    err.close()
                    return
                running.append((node, proc, err))
            deadline = t0 + check.timeout
            while any(p.poll() is None for _, p, _ in running) and time.monotonic() < deadline:
                if any(p.poll() for _, p, _ in running):
                    deadline = min(deadline, time.monotonic() + AFTER_FIRST_EXIT_S)
                time.sleep(0.1)
            hung = [node for node, p, _ in running if p.poll() is None]
            why = (f"timeout {check.timeout:g} s" if time.monotonic() >= t0 + check.timeout else
                   f"{AFTER_FIRST_EXIT_S} s after another node failed")
            for _, p, _ in running:
                procs.stop(p)
            reasons = []
            for node, p, err in running:
                err.seek(0)
                if node in hung:
                    reasons.append(f"{f'node {node}: ' if node is not None else ''}still running after "
                                   f"{time.monotonic() - t0:.0f} s ({why}); stopped")
                elif p.returncode:
                    text = err.read()
                    if not verdict_exit(check, p.returncode, text):
                        reasons.append(_reason(p.returncode, text, node))
            result.reason = "; ".join(reasons)
        except STOPS as stop:
            for _, p, _ in running:
                procs.stop(p)
            result.reason = "interrupted (Ctrl-C)" if isinstance(stop, KeyboardInterrupt) else "stopped (SIGTERM)"
            raise
        finally:
            for _, _, err in running:
                err.close()
            result.seconds = time.monotonic() - t0
            result.records = [dict(r, accept_check=check.name) for r in read_records(out)]
            if out.exists():
                out.unlink()
            if not result.records and not result.reason:
                result.reason = "the run wrote no records"


def judge(result, baseline):
    """Every threshold on the check's records. A baseline that is an earlier accept run is compared check by
    check (its records of the check with the same name); other baselines whole."""
    if baseline:
        baseline = [r for r in baseline if r.get("accept_check") == result.check.name] or baseline
    result.outcomes = [thresholds.judge(t, result.records, baseline) for t, _ in result.check.thresholds]
    if result.check.row.verdict:
        result.outcomes.append(own_verdict(result))
    if result.check.expect:      # what NCCL reported it ran, whatever the numbers say
        result.outcomes.append(expect_outcome(result.check.expect, result.records))
    return result


def own_verdict(result):
    """The Outcome of the verdict record a self-judging command (pairs) wrote: passed or not, its reason."""
    threshold = thresholds.Threshold(result.check.row.verdict)
    found = [r for r in result.records if r.get("event") == "verdict"]
    if result.reason or not found:
        return thresholds.Outcome(threshold, False, message=f"not judged: {result.reason or 'no verdict record'}")
    said, why = found[-1].get("passed"), shown(str(found[-1].get("reason")), 300)
    if said is None:      # nothing to judge (pairs of emulated nodes share one machine's loopback)
        return thresholds.Outcome(threshold, True, skipped=True, message=why)
    return thresholds.Outcome(threshold, said is True, judged=1, message=why)


def with_hosts(spec, hosts, ssh_command):
    """(hosts, ssh command) for the multi-node checks: enough hosts for each; not beside a cluster exec prefix."""
    if not hosts:
        return [], None
    if spec.cluster:
        raise UserError(f"--hosts: {name(spec.path)} starts its nodes with cluster exec; give one or the other")
    most = max((c for c in spec.checks if c.row.nodes_key), key=lambda c: c.nodes(), default=None)
    if most and most.nodes() > len(hosts):
        raise UserError(f"check {shown(most.name, 100)} runs on {most.nodes()} nodes; --hosts names {len(hosts)}")
    return hosts, ssh_command


def writable(directory):
    """directory, checked to take a new file (a read-only mount refuses here, before any check runs)."""
    probe = directory / ".accept-write-test"
    try:
        write_new(probe, lambda f: f.write(b"x"), "--out", binary=True)
        probe.unlink()
    except OSError as exc:
        raise UserError(f"--out {name(directory)}: cannot write there ({exc.strerror}); nothing was run") from None
    return directory


def unknown_env(spec):
    """What the run says of env variables a spec allowed: outside the catalogue (allow_unknown_env), and those
    naming a library or file NCCL loads or writes (allow_paths, or allow_unknown_env), with their values."""
    notes = []
    for c in spec.checks:
        unknown = [k for k in c.env if k not in CATALOGUE]
        paths = [f"{k}={shown(c.env[k], 200)}" for k in c.env if is_path(k)]
        if unknown and c.allow_unknown_env:
            notes.append(f"{c.name}: env {', '.join(unknown)} set with allow_unknown_env: true (not in `commbench "
                         "env`'s catalogue)")
        if paths:
            notes.append(f"{c.name}: env {', '.join(paths)}: a library or file NCCL loads or writes, set with "
                         f"{'allow_paths' if c.allow_paths else 'allow_unknown_env'}: true")
    return notes


def run(spec, out, baseline_path, programs, nodes=None):
    """Run every check; write the outputs; returns the exit code. nodes: (drain.Scope, on_fail, on_error, on_pass)
    when Slurm nodes may be drained or resumed (None: nobody)."""
    baseline = None
    if baseline_path:
        baseline, refused = load_many([baseline_path])
        if refused:
            raise UserError("--baseline " + "; ".join(refused))
    validate(spec, programs)
    run_id = new_run_id()
    directory = writable(out_dir(out or f"acceptance-{run_id}").resolve())
    results, records, code, t0 = [], [], EXIT_PASS, time.monotonic()
    con = console(stderr=True)
    con.print(f"accept: {len(spec.checks)} checks from {name(spec.path)}; output in {name(directory)}", markup=False)
    for note in unknown_env(spec):
        con.print(f"note: {note}", markup=False)
    written = Written(directory)
    writer = written("results.jsonl", RecordWriter, directory / "results.jsonl")
    with Reporter("accept", [1] * len(spec.checks)) as progress:
        try:
            for i, check in enumerate(spec.checks):
                progress.step(i, f"{check.name} ({check.kind})")
                result = Result(check, [])
                try:
                    run_check(spec, i, directory, result)
                except STOPS as stop:
                    code = stop_code(stop)
                judge(result, baseline)
                results.append(result)
                for rec in result.records + [verdict_event(result, run_id)]:
                    if writer:
                        written("results.jsonl", writer.write, rec)
                    records.append(rec)
                progress.print(summary(result))
                if code != EXIT_PASS:
                    break
        except STOPS as stop:
            code = stop_code(stop)
    results += [Result(c, [], ran=False, reason="not run: interrupted before it") for c in spec.checks[len(results):]]
    if code == EXIT_PASS and not all(r.passed for r in results):
        code = EXIT_FAIL
    drained, resumed = drain.act(spec, results, *nodes) if nodes and code in (EXIT_PASS, EXIT_FAIL) else ([], [])
    for line in drain.lines(drained, resumed):
        con.print(f"accept: {line}", markup=False)
    with procs.signals_blocked():   # the verdict's outputs first; then what is optional and may fail on its own
        if writer:
            written("results.jsonl", writer.close)
        entries, nodes_seen = history.record_accept(spec, results, run_id, drained, resumed,
                                                    str(directory / "report.html"))
        write_outputs(written, spec, results, records, baseline_path, baseline or [], run_id,
                      time.monotonic() - t0, code, unknown_env(spec), drained, resumed, nodes_seen)
        written("history", history.append, spec.history, entries)
    metrics.publish(records, "commbench", spec=os.path.basename(spec.path))   # --metrics; --pushgateway: a warning
    passed = sum(r.passed for r in results)
    click.echo(f"accept: {({EXIT_PASS: 'PASS', EXIT_FAIL: 'FAIL'}).get(code, 'INTERRUPTED')}: "
               f"{passed} of {len(results)} checks passed; {name(directory)}/verdict.json, junit.xml, report.html")
    written.check()
    return code


@click.command("accept")
@quiet_option
@click.option("--spec", "spec_path", default=None, metavar="FILE", help="The acceptance spec (YAML).")
@click.option("--out", default=None, metavar="DIR",
              help="New or empty directory for the outputs [default: a new acceptance-<run id>/ here]; an existing "
                   "non-empty one is refused (nothing is overwritten).")
@click.option("--baseline", default=None, metavar="RESULTS",
              help="Results (records, nccl-tests logs, fio JSON) for 'no regression > N % vs baseline'.")
@click.option("--dry-run", is_flag=True, help="Check the spec and print each check's command; run nothing.")
@click.option("--init", "init", is_flag=True, help="Print a starting spec for --topology and --nodes to stdout.")
@click.option("--topology", default=None, metavar="NAME|FILE", help="With --init: the topology the spec is for.")
@click.option("--nodes", type=click.IntRange(1), default=1, show_default=True, help="With --init: node count.")
@click.option("--on-fail", type=click.Choice(["report", "drain"]), default="report", show_default=True,
              help="drain: inside a Slurm allocation, `scontrol update State=DRAIN` each node a failed check names "
                   "(pairs' bad nodes, a hung run's culprit ranks, a failed storage check's node), the check and "
                   "measurement as the reason; in a node's own Slurm script (Prolog, Epilog, HealthCheckProgram), "
                   "this node when a check fails; the reason 'commbench accept: CHECK [DIGEST]: why', DIGEST a hash "
                   "of the check's whole definition. Shared storage (network, parallel or object stores) below its "
                   "bound drains nobody, nor does a FUSE file system of unknown locality.")
@click.option("--on-error", type=click.Choice(["report", "drain"]), default="report", show_default=True,
              help="drain: also drain the node a check ran on when it could not run (a tool error, its timeout, "
                   "nothing measured); report: such a check drains nobody.")
@click.option("--on-pass", type=click.Choice(["report", "resume"]), default="report", show_default=True,
              help="resume: `scontrol update State=RESUME` a node that commbench drained for a check (its reason "
                   "'commbench accept: CHECK [DIGEST]: ...') when that same check (name and digest) passes on it "
                   "again; never a node drained by someone else, for another check, or for a stricter one of the "
                   "same name.")
@click.option("--history", "history_path", default=None, metavar="FILE",
              help="Append each node's verdict of this run to FILE (JSONL; `commbench health FILE` reads it), after "
                   "the verdict's own outputs; only its end is read back (the report's node history) [default: the "
                   "spec's history:].")
@click.option("--hosts", default=None, metavar="H1,H2,...",
              help="Start each multi-node commbench check over ssh on its first --nodes of these hosts.")
@click.option("--hostfile", default=None, metavar="FILE", help="The hosts of --hosts from a file, one per line.")
@click.option("--ssh-command", default=DEFAULT_SSH, show_default=True, metavar="TEMPLATE",
              help="How --hosts are reached: words, {host} replaced in them.")
@metrics.metrics_options
def accept(spec_path, out, baseline, dry_run, init, topology, nodes, on_fail, on_error, on_pass, history_path, hosts,
           hostfile, ssh_command):
    """Cluster acceptance: run a spec's checks, judge their thresholds, write a verdict for CI and people.

    Writes DIR/results.jsonl (every record, each with accept_check), junit.xml (a testcase per check and
    threshold), report.md + report.html (plots with the thresholds drawn), verdict.json. Exit 0 when every
    check passes, 1 when one fails, 2 when the run cannot be done, 130 on Ctrl-C, 143 on SIGTERM (outputs still
    written).

    \b
    Example:
      commbench accept --init --topology dgx-h100 --nodes 2 > acceptance.yaml
      commbench accept --spec acceptance/localhost.yaml --out accept-today/ --baseline accept-last/results.jsonl
    """
    if init:
        if not topology:
            raise UserError("--init needs --topology: commbench accept --init --topology dgx-h100 --nodes 2 "
                            "> spec.yaml")
        misplaced = given("spec_path", "out", "baseline", "dry_run", "on_fail", "on_error", "on_pass")
        if misplaced:
            example = (f"commbench accept --init --topology {shown(shlex.quote(topology), 300)} --nodes {nodes} "
                       f"> spec.yaml")
            raise UserError(f"{', '.join(misplaced)}: not with --init, which prints a starting spec to stdout and runs "
                            f"nothing ({example})")
        click.echo(init_text(topology, nodes), nl=False)
        return
    misplaced = given("topology", "nodes")
    if misplaced:
        raise UserError(f"{', '.join(misplaced)}: only with --init (a spec names its own topology and nodes)")
    if not spec_path:
        raise UserError("give --spec FILE (or --init --topology NAME to write one)")
    spec = load_spec(spec_path)
    spec.history = history_path or spec.history
    history.check(spec.history)
    spec.hosts, spec.ssh_command = with_hosts(spec, host_list(hosts, hostfile), ssh_command)
    asked = [f"--{o} {v}" for o, v in (("on-fail", on_fail), ("on-error", on_error), ("on-pass", on_pass))
             if v != "report"]
    actions = (drain.scope(asked[0]), on_fail, on_error, on_pass) if asked else None
    programs = {"commbench.commands.cli": click.get_current_context().find_root().command, "iobench.cli": iobench_cli}
    if dry_run:
        validate(spec, programs)
        for i, check in enumerate(spec.checks):
            for node, argv in spec.commands(check, i, "OUT/results.jsonl"):
                env = " ".join(f"{k}={shlex.quote(v)}" for k, v in check.env.items()) if node is None else ""
                click.echo(f"# {check.name}\n{env + ' ' if env else ''}{shlex.join(argv)}")
        return
    sys.exit(run(spec, out, baseline, programs, actions))
