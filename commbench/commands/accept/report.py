"""The acceptance report (report.md and report.html say the same, benchcore.report.page.Doc): the verdict first, a
banner with PASS / FAIL, the spec, the cluster's hosts, the date and the suite's version; a table of the checks,
failures first (status, measured vs expected, at which size, a link to its section); then one section per check
with its thresholds, its measurements and its plots, each threshold drawn on the axis of the field it bounds. A
commbench check with a topology (its own or the spec's) is judged as `commbench report --topology` judges a file
(commbench judge's verdict, through the same report code: benchcore.report.judged): the model per algorithm, the
link peak util is over and the published references with their sources in its plots, util, ceiling, model and
class in its tables, the judge's verdict and why sizes were not judged in its lines. The judge's verdict is not
one of the check's thresholds (an `expected` check makes it one)."""
import shlex
from importlib import metadata
from pathlib import Path

from benchcore.errors import UserError
from benchcore.report import judged as judged_rows
from benchcore.report import page
from benchcore.report.plots import plots, slug
from benchcore.results import thresholds
from benchcore.results import usable
from benchcore.results.read import measurements
from benchcore.results.records import git_revision, timestamp
from benchcore.units import readable_size
from commbench.commands.history import TAIL_BYTES

ORDER = {"FAIL": 0, "NOT RUN": 1, "PASS": 2}
CHECKS = [("check", "check", None), ("status", "status", None), ("kind", "kind", None),
          ("versus", "measured vs expected", None), ("size", "at size", None)]
OUTCOMES = [("threshold", "threshold", None), ("status", "status", None), ("measured", "measured", None),
            ("expected", "expected", None), ("size", "at size", None), ("message", "detail", None)]


def status(result):
    return "NOT RUN" if not result.ran else "PASS" if result.passed else "FAIL"


def _outcome_status(o):
    return "SKIPPED" if o.skipped else "PASS" if o.passed else "FAIL"


def _deciding(result):
    """The outcome a check's row shows: its first failed threshold, else the one nearest its bound."""
    judged = [o for o in result.outcomes if not o.skipped]
    failed = [o for o in judged if not o.passed]
    numeric = [o for o in judged if o.measured and o.expected]
    if failed or not numeric:
        return (failed or judged or [None])[0]
    return min(numeric, key=lambda o: o.measured / o.expected if o.threshold.op in thresholds.HIGHER
               else o.expected / o.measured)


def _versus(result, o):
    if result.reason:                   # the run itself failed (crashed, hung, refused): that is the finding
        return " ".join(result.reason.split())
    if o is None:
        return "no threshold judged" if result.ran else "not run (interrupted before it)"
    if o.measured is None or o.expected is None:
        return f"{o.threshold.text}: {o.message}"
    return f"{o.threshold.text}: measured {o.shown(o.measured)}, expected {_expected(o)}"


def _expected(o):
    """'>= 1,000 GB/s' in the spec's unit; a regression check's expected is the baseline's figure, not a bound:
    'baseline 892.7 us'."""
    if o.expected is None:
        return None
    return f"{o.threshold.op or 'baseline'} {o.shown(o.expected)}"


def _size(v):
    """'16M' where the size is a whole unit, else '21.4M (22,484,704 B)': never a bare 8-digit byte count."""
    return readable_size(v) if v else "n/a"


HISTORY = [("node", "node", None), ("last_result", "this run", None), ("fails", "fails in its last runs", None),
           ("flaps", "flaps", None), ("last_pass", "last pass", None), ("actions", "drained / resumed", None),
           ("command", "its history", None)]


def history_section(path, nodes):
    """Each node of this run against its history: the counts, and the command that shows the whole of it."""
    rows = [{"node": n["node"], "last_result": n["last_result"], "fails": f"{n['failures']} of {n['window']}",
             "flaps": n["flaps"],
             "last_pass": n["last_pass"] or ("not in its runs read" if n.get("partial") else "never"),
             "actions": " / ".join(x or "-" for x in (n["drained"], n["resumed"])),
             "command": f"commbench health {shlex.quote(path)} --node {shlex.quote(n['node'])}"} for n in nodes]
    read = [f"history file: {path}"] + (["read from its end (the last runs of each node, at most the last "
                                          f"{TAIL_BYTES >> 20} MiB): last pass, drained and resumed count from there"]
                                         if any(n.get("partial") for n in nodes) else [])
    return page.Section("node history", "node-history", read,
                        [("each node of this run in the history", HISTORY, rows)])


def judged_of(result, records):
    """(the judge's verdict rows, lines for the check's section) of a commbench check's records on its topology,
    as `commbench report --topology` makes them (commbench.commands.judge.report_verdict): ({}, []) for a check
    that measured no busbw; a check of no topology says what one would draw."""
    recs = [r for r in measurements(records) if r["tool"] == "commbench" and usable.usable(r.get("busbw_gbps"))]
    if not recs:
        return {}, []
    topology = result.check.values.get("topology")
    if not topology:
        return {}, ["no topology (the spec's or the check's): no model, link peak or published reference drawn"]
    from commbench.commands.judge import report_verdict
    try:
        events = report_verdict(records, topology)
    except UserError as e:      # a topology file gone since the check ran: the report is still written
        return {}, [f"not judged against {topology}: {e}"]
    lines = [f"{ev['event']}: {ev['reason']}" for ev in events]
    return judged_rows.rows_of(events), [f"commbench judge on {topology} (as report --topology; drawn and tabled, "
                                         f"not a threshold of this check): {lines[0]}"] + lines[1:]


def _suite():
    try:
        version = metadata.version("commbench-iobench")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"{version} (git {git_revision()})"


def document(directory, spec, results, records, baseline, verdict, lead, summary, nodes_seen=None):
    """The accept Doc (verdict: PASS, FAIL or INTERRUPTED; lead: lines before the notes; summary(result): a check's
    one line; nodes_seen: (history file, this run's nodes' summaries) where a history is kept); draws each check's
    plots into directory (their file names unique across checks)."""
    recs = measurements(records)
    hosts = sorted({h for r in recs for h in (r.get("hosts") or []) if isinstance(h, str)})
    passed = sum(r.passed for r in results)
    facts = [("spec", spec.path), ("hosts", ", ".join(hosts) or "n/a"), ("date", timestamp()),
             ("suite", _suite()), ("checks passed", f"{passed} of {len(results)}")]
    rows, sections, taken = [], [], set()
    for result in sorted(results, key=lambda r: ORDER[status(r)]):
        name, anchor = result.check.name, f"check-{slug(result.check.name)}"
        o = _deciding(result)
        rows.append({"check": page.Link(name, anchor), "status": status(result), "kind": result.check.kind,
                     "versus": _versus(result, o), "size": _size(o.size_bytes) if o else "n/a"})
        joined, mine, base = page.compared([r for r in recs if r.get("accept_check") == name], baseline)
        judged, said = judged_of(result, [r for r in records if r.get("accept_check") == name])
        outcomes = [{"threshold": x.threshold.text, "status": _outcome_status(x),
                     "measured": x.shown(x.measured) if x.measured is not None else None,
                     "expected": _expected(x),
                     "size": _size(x.size_bytes), "message": x.message} for x in result.outcomes]
        tables = [("thresholds", OUTCOMES, outcomes)] if outcomes else []
        tables += [(f"{sec.title}; {caption}", columns, data) for sec in page.sections(joined, judged)
                   for caption, columns, data in sec.tables]
        images, left_out = plots(directory, mine, base, thresholds.plot_marks(result.outcomes), taken, judged)
        lines = [summary(result)] + said + ([left_out] if left_out else [])
        sections.append(page.Section(f"{status(result)} {name} ({result.check.kind})", anchor, lines, tables,
                                           images))
    if nodes_seen:
        sections.append(history_section(*nodes_seen))
    notes = list(lead) + [f"{r.get('event')}: {r.get('reason')}" for r in records
                          if r.get("event") and r.get("event") != "verdict"]
    notes += page.value_notes(recs, baseline)
    return page.Doc(f"commbench accept: {Path(spec.path).name}", f"{verdict}: {passed} of {len(results)} "
                          "checks passed", facts, ("checks, failures first", CHECKS, rows), notes, sections)

