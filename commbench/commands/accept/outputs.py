"""What an accept run leaves behind: the verdict event per check, the one-line summary, junit.xml, the report
(report.md + report.html through benchcore.report.page) and verdict.json, each written on its own (Written):
one that cannot be written (a full or read-only file system) is named in one line, the others are kept."""
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from benchcore.errors import UserError, WriteFailed
from benchcore.files import write_new, write_new_text
from benchcore.inputs import name
from benchcore.report import page
from benchcore.results import schema, thresholds
from benchcore.results.read import measurements
from benchcore.results.records import hostname, timestamp
from benchcore.units import format_size
from commbench.commands.accept import drain, report
from commbench.commands.verdict import settings_of

EXIT_PASS, EXIT_FAIL = 0, 1
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")   # what XML 1.0 cannot hold


class Written:
    """The outputs of a run written one by one into directory: a file whose write fails (OSError) is remembered
    with why, is not written to again, and the others still are; check() then raises the one line naming them."""

    def __init__(self, directory):
        self.directory, self.failed = directory, {}

    def __call__(self, output, write, *args):
        """write(*args) for the output named output; its result, or None when it failed now or before."""
        if output in self.failed:
            return None
        try:
            return write(*args)
        except OSError as exc:
            self.failed[Path(exc.filename).name if exc.filename else output] = exc.strerror or str(exc)
            return None
        except WriteFailed as exc:   # the report's own writer names the file it could not write
            self.failed[f"{output}: {exc.filename}"] = exc.why
            return None

    def check(self):
        if self.failed:
            kept = sorted(p.name for p in self.directory.iterdir() if p.name not in self.failed)
            raise UserError(f"could not write {'; '.join(f'{n} ({why})' for n, why in self.failed.items())} in "
                            f"{name(self.directory)}; kept what was written ({', '.join(kept) or 'nothing'})")


def verdict_event(result, run_id):
    return schema.event("commbench", "verdict", summary(result), run_id=run_id, check=result.check.name,
                        accept_check=result.check.name, passed=result.passed, seconds=round(result.seconds, 1),
                        rows=[o.as_dict() for o in result.outcomes])


def summary(result):
    if not result.ran:
        return f"{result.check.name}: not run (interrupted before it)"
    failed = [o for o in result.outcomes if not o.passed]
    skipped = sum(o.skipped for o in result.outcomes)
    head = f"{'PASS' if result.passed else 'FAIL'} {result.check.name} ({result.seconds:.0f} s)"
    parts = [result.reason] if result.reason else []
    parts += [f"{o.threshold.text}: {o.message}" for o in failed]
    if not parts:
        parts = [f"{len(result.outcomes) - skipped} thresholds met" + (f", {skipped} skipped" if skipped else "")]
    return f"{head}: " + "; ".join(parts)


def junit(results, spec, seconds, path):
    """JUnit XML: one testsuite, a testcase per check ('runs') and per threshold; failures carry measured vs
    expected and the size; elements and attributes the JUnit schema requires are all present."""
    cases = []
    for r in results:
        run_case = ET.Element("testcase", name="runs", classname=r.check.name, time=f"{r.seconds:.3f}")
        if not r.ran:
            ET.SubElement(run_case, "skipped", message="not run: interrupted before it")
        elif r.reason:
            failure = ET.SubElement(run_case, "failure", message=r.reason, type="run")
            failure.text = "\n".join(r.commands)
        cases.append(run_case)
        own = [(thresholds.Threshold(r.check.row.verdict), None)] if r.check.row.verdict else []
        judged = r.check.thresholds + own
        for (t, line), o in zip(judged, r.outcomes or [None] * len(judged)):
            case = ET.Element("testcase", name=t.text, classname=r.check.name, time="0",
                              file=spec.path, line=str(line or r.check.line))
            if o is None:
                ET.SubElement(case, "skipped", message="not judged: the check did not run")
            elif o.skipped:
                ET.SubElement(case, "skipped", message=o.message)
            elif not o.passed:
                failure = ET.SubElement(case, "failure", message=o.message, type="threshold")
                size = format_size(o.size_bytes) if o.size_bytes else "n/a"    # values as the spec writes them
                failure.text = (f"measured: {o.shown(o.measured)}\nexpected: {t.op or 'baseline'} "
                                f"{o.shown(o.expected)}\nsize: {size}\n")
            cases.append(case)
    failures = sum(c.find("failure") is not None for c in cases)
    skipped = sum(c.find("skipped") is not None for c in cases)
    suite = ET.Element("testsuite", name=f"commbench accept {Path(spec.path).name}", tests=str(len(cases)),
                       failures=str(failures), errors="0", skipped=str(skipped), time=f"{seconds:.3f}",
                       timestamp=timestamp()[:19], hostname=hostname(), id="0",
                       package="commbench.commands.accept.command")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="spec", value=spec.path)
    suite.extend(cases)
    ET.SubElement(suite, "system-out").text = "\n".join(summary(r) for r in results)
    ET.SubElement(suite, "system-err")
    root = ET.Element("testsuites", name="commbench accept", tests=str(len(cases)), failures=str(failures),
                      errors="0", time=f"{seconds:.3f}")
    root.append(suite)
    for element in root.iter():   # a name, reason or command with a control character stays well-formed XML
        element.text = NOT_XML.sub("?", element.text) if element.text else element.text
        element.attrib = {k: NOT_XML.sub("?", v) for k, v in element.attrib.items()}
    ET.indent(root)
    write_new(path, lambda f: ET.ElementTree(root).write(f, encoding="utf-8", xml_declaration=True), "junit.xml",
              binary=True)


def _lines(check):
    """The spec line of each outcome of a check: its thresholds', then the check's own for its verdict."""
    return [line for _, line in check.thresholds] + [check.line]


def write_outputs(written, spec, results, records, baseline_path, baseline, run_id, seconds, code, notes=(),
                  drained=(), resumed=(), nodes_seen=None):
    """verdict.json first (the smallest, what CI reads), junit.xml, then the report; notes: lines the report
    and verdict.json carry (env variables a spec allowed outside the catalogue or naming files); drained and
    resumed: what --on-fail/--on-error drain and --on-pass resume did, node by node."""
    directory = written.directory
    verdict = {"spec": spec.path, "run_id": run_id, "passed": code == EXIT_PASS, "exit_code": code,
               "interrupted": code not in (EXIT_PASS, EXIT_FAIL), "seconds": round(seconds, 1),
               "baseline": baseline_path,
               "notes": list(notes), "drained": list(drained), "resumed": list(resumed),
               "history": {"file": nodes_seen[0], "nodes": nodes_seen[1]} if nodes_seen else None,
               "checks": [{"name": r.check.name, "kind": r.check.kind, "line": r.check.line, "ran": r.ran,
                           "passed": r.passed, "status": drain.status(r), "reason": r.reason or None,
                           "seconds": round(r.seconds, 1),
                           "records": len(r.records), "commands": r.commands, "env": r.check.env,
                           "applied": settings_of(r.records, lambda rec: 0, lambda rec: rec.get("applied")).get(0, {}),
                           "allow_unknown_env": r.check.allow_unknown_env, "allow_paths": r.check.allow_paths,
                           "thresholds": [{**o.as_dict(), "line": line}
                                          for o, line in zip(r.outcomes, _lines(r.check))]}
                          for r in results]}
    written("verdict.json", write_new_text, directory / "verdict.json", json.dumps(verdict, indent=2) + "\n",
            "verdict.json")
    written("junit.xml", junit, results, spec, seconds, directory / "junit.xml")
    lead = list(notes) + list(drain.lines(drained, resumed))
    if baseline_path:
        lead.append(f"baseline: {baseline_path} (dashed/hatched in the plots)")
    word = {EXIT_PASS: "PASS", EXIT_FAIL: "FAIL"}.get(code, "INTERRUPTED")
    written("the report (report.md, report.html, plots)", _report, directory, spec, results, records, baseline,
            word, lead, nodes_seen)


def _report(directory, spec, results, records, baseline, verdict, lead, nodes_seen):
    doc = report.document(directory, spec, results, records, baseline, verdict, lead, summary, nodes_seen)
    page.write_doc(directory, doc, measurements(records), "csv")
