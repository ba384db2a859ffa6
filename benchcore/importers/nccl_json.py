"""nccl-tests' JSON (-J FILE.json, nccl-tests 2.17 on; rccl-tests' -J writes the same) and rccl-tests' own JSON
and CSV (-Z json|csv -X FILE) read into commbench records, as their writers lay them out:

  nccl-tests  src/util.cu, JSON_FILE_VERSION 1 to 3: one object on one line: version, start_time, args (argv:
              its binary names the collective), env ("K=V" strings), nccl_version (NCCL_VERSION_CODE), config
              {nthreads, ngpus, ..., warmup_iters, iterations, aggregated_iterations, validation, graph,
              blocking_collectives ("true"/"false" as strings), devices: the first rank line of each process},
              results [{size, count, type, redop, root ("%6i" text), out_of_place and in_place {time or cpu_time
              (-C), alg_bw, bus_bw, nwrong (null without -c)} or null, per-iteration statistics (version 2 on;
              not read), actual_iterations, experiment_name}], out_of_bounds {count, okay}, average_bus_bandwidth,
              errors, end_time. Numbers are printf's %lf: NaN is the string "nan", infinity a bare inf (not JSON).
              A run that fails closes what it left open: its results stop early and out_of_bounds is missing.
  rccl-tests  src/common.cu's Reporter: a list of flat objects, one a line, one per row and placement: numCycle,
              name (AllReduce), nodes ranks ranksPerNode gpusPerRank (MPI builds: ranksPerNode is the processes
              of the communicator, nodes the communicators, not hosts) or gpus (one process), size, type, redop,
              inPlace (0/1), time (us), algBw, busBw, wrong (the count, or N/A, as a string). Its CSV: a header
              (numCycle,collective,...,size,type,redop,inplace,time,algbw,busbw,#wrong), then the same values.

The document is read whole, up to MAX_BYTES, and every value it gives is checked for its type: a hostile file
(huge, nested deep, values of the wrong kind) is refused in one line.
"""
import csv
import io
import json
import math
import re

from benchcore.errors import UserError
from benchcore.importers import nccl_names as names
from benchcore.inputs import MAX_WHOLE, clipped, read_bytes, shown
from benchcore.results import schema
from benchcore.vocabulary import nccl_tests_type

NCCL, RCCL, RCCL_CSV = "nccl-tests-json", "rccl-tests-json", "rccl-tests-csv"
HEADS = {NCCL: re.compile(r'\s*\{\s*"version"\s*:\s*\d+\s*,\s*"start_time"\s*:'),
         RCCL: re.compile(r'\s*\[\s*\{\s*"numCycle"\s*:'), RCCL_CSV: re.compile(r"\s*numCycle,collective,")}
CSV_KEYS = {"collective": "name", "inplace": "inPlace", "algbw": "algBw", "busbw": "busBw", "#wrong": "wrong"}
FIRST_KEY = {NCCL: re.compile(r'\{\s*"size"\s*:'), RCCL: re.compile(r'\{\s*"numCycle"\s*:')}  # a row's object
MAX_BYTES = 32 << 20     # a real document is KBs (MBs with per-iteration times); parsed, a number takes ~30 B
BARE = re.compile(r"(?<=[:,\[])(\s*)-?(?:inf|nan)\b")
WHOLE = re.compile(r"[0-9]{1,30}")   # a count written as text: ASCII digits (str.isdigit takes "²" for one)
ENV_PREFIXES = ("NCCL_", "RCCL_")   # the variables that configure the run; the rest of its environment is not kept


def kind(head):
    """NCCL, RCCL or RCCL_CSV when a file's first bytes are one of these documents, else None."""
    return next((fmt for fmt, head_re in HEADS.items() if head_re.match(head)), None)


def records(path, run_id, collective=None):
    """The records and events of the document at path; collective: --collective (what the file does not say)."""
    text = read_bytes(path, "input", MAX_BYTES).decode("utf-8", errors="replace")
    if kind(text) == RCCL_CSV:
        return _rccl(_csv(text), range(2, text.count("\n") + 3), path, run_id, collective, RCCL_CSV)
    try:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = json.loads(BARE.sub(r"\1null", text))    # printf's bare inf / nan: no value
    except RecursionError:
        raise UserError("JSON nested deeper than any nccl-tests document (refused)") from None
    except ValueError as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise UserError(f"not valid JSON{where}: {shown(str(exc).split(':')[0], 80)}: the file is cut short or not "
                        f"as nccl-tests/rccl-tests write it") from None
    if isinstance(doc, dict):
        return _nccl(doc, text, path, run_id, collective)
    if isinstance(doc, list):
        return _rccl(doc, _lines(text, RCCL, len(doc)), path, run_id, collective, RCCL)
    raise UserError("JSON that is neither nccl-tests' object nor rccl-tests' list")


def _value(value, where, whole=False, null=False):
    """A number as the writers put it (whole: a count >= 0); None for their no-value ("nan", a bare inf, "N/A")
    and, with null, for null or a missing key; UserError naming where for anything else."""
    if isinstance(value, str) and whole and value.isascii() and value.isdigit() and not WHOLE.fullmatch(value):
        raise UserError(f"{where} is beyond 2**63 - 1: more than any run has")
    if isinstance(value, str):
        value = int(value) if whole and WHOLE.fullmatch(value) else None if value in ("nan", "-nan", "N/A") else value
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    if value is None:
        if null:
            return None
        raise UserError(f"{where} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and (value < 0 or value != int(value))):
        raise UserError(f"{where} is {_type(value)}, not a {'count' if whole else 'number'}")
    if whole and value > MAX_WHOLE:
        raise UserError(f"{where} is beyond 2**63 - 1: more than any run has")
    return int(value) if whole else float(value)


def _kind(value, types, where, null=True):
    if value is None and null:
        return None
    if not isinstance(value, types) or isinstance(value, bool) and bool not in types:
        what = " or ".join({dict: "an object", list: "a list", str: "text", int: "an integer", bool: "true/false"}
                           [t] for t in types)
        raise UserError(f"{where} is {_type(value)}, not {what}")
    return value


def _type(value):
    """What a refused value is, never the value: the file may be anything."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a negative number" if value < 0 else "a fraction" if value != int(value) else "a number"
    return {dict: "an object", list: "a list", str: "text", bool: "true/false"}.get(type(value), "null")


def _lines(text, fmt, count):
    """1-based lines of the first count row objects (None each when the document does not hold as many)."""
    if not count:
        return []
    lines, line, at = [], 1, 0
    for m in FIRST_KEY[fmt].finditer(text):
        line, at = line + text.count("\n", at, m.start()), m.start()
        lines.append(line)
        if len(lines) == count:
            return lines
    return [None] * count


def _version(code):
    """NCCL_VERSION_CODE as text: 22703 -> 2.27.3 (2.9 on), 2708 -> 2.7.8 (before)."""
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _record(common, fields, line, cycles):
    """One measurement: fields of the row and placement; size -> count by the type's width, as for logs."""
    dtype, word = nccl_tests_type(fields.pop("type"))
    rec = schema.measurement("commbench", **common, **clipped(fields), dtype=clipped(dtype), source_line=line)
    if word:
        rec["count"] = rec["size_bytes"] // word
    if rec["op"] == "none":
        rec["op"] = None
    key = (rec["dtype"], rec["op"], rec.get("root"), rec["size_bytes"], rec["in_place"])
    cycles[key] = cycles.get(key, -1) + 1
    rec["cycle"] = cycles[key]
    return rec


def _cycles(out):
    """Every record says its cycle when a row repeats (nccl-tests -N), none when none does (as for logs)."""
    if not any(r.get("cycle") for r in out):
        for r in out:
            r.pop("cycle", None)
    return out


def _nccl(doc, text, path, run_id, option):
    where = "nccl-tests JSON"
    args = _kind(doc.get("args"), (list,), f"{where} args") or []
    config = _kind(doc.get("config"), (dict,), f"{where} config") or {}
    devices = _kind(config.get("devices"), (list,), f"{where} config.devices") or []
    hosts = [_kind(_kind(d, (dict,), f"{where} config.devices[{i}]", False).get("hostname"), (str,),
                   f"{where} config.devices[{i}].hostname") for i, d in enumerate(devices)]
    hosts = list(dict.fromkeys(h for h in hosts if h)) or None
    setting = {k: _value(config.get(k), f"{where} config.{k}", True, True) for k in
               ("nthreads", "ngpus", "graph", "iterations", "warmup_iters", "aggregated_iterations")}
    env = [_kind(e, (str,), f"{where} env[]", False) for e in _kind(doc.get("env"), (list,), f"{where} env") or []]
    code = _kind(doc.get("nccl_version"), (int,), f"{where} nccl_version")
    results = _kind(doc.get("results"), (list,), f"{where} results") or []
    program = _kind(args[0], (str,), f"{where} args[0]") if args else None
    from_file = names.in_file_name(path)
    collective = names.named(program) or option or (from_file[0] if len(from_file) == 1 else None)
    if results and collective is None:
        raise UserError(names.unnamed(path, from_file, f"its binary's name (args[0]) names none"))
    ranks = len(devices) * (setting["nthreads"] or 0) * (setting["ngpus"] or 0)   # a device line per process
    blocking = config.get("blocking_collectives")
    common = dict(run_id=run_id, collective=collective, backend="nccl", hosts=clipped(hosts),
                  nodes=len(hosts) if hosts else None, world_size=ranks or None,
                  versions={"nccl": _version(code)} if code and code > 0 else None,
                  env=clipped(dict(e.split("=", 1) for e in env if e.startswith(ENV_PREFIXES) and "=" in e)),
                  blocking=blocking in ("true", True) if blocking is not None else None,
                  iters=setting["iterations"], warmup=setting["warmup_iters"],
                  agg_iters=setting["aggregated_iterations"], source_file=path, source_format=NCCL)
    graph = setting["graph"]
    out, cycles = [], {}
    for i, (row, line) in enumerate(zip(results, _lines(text, NCCL, len(results)))):
        at = f"{where}{f' line {line}' if line else ''} results[{i}]"
        row = _kind(row, (dict,), at, False)
        root = _kind(row.get("root"), (str, int), f"{at}.root")
        try:
            root = int(root) if root is not None else None
        except ValueError:
            raise UserError(f"{at}.root is text that is not a rank") from None
        for key, in_place in (("out_of_place", False), ("in_place", True)):
            place = _kind(row.get(key), (dict,), f"{at}.{key}")
            if place is None:
                continue                                      # not measured (only in-place)
            time = place.get("cpu_time", place.get("time"))
            values = [_value(v, f"{at}.{key}.{k}", null=True) for k, v in
                      (("time", time), ("alg_bw", place.get("alg_bw")), ("bus_bw", place.get("bus_bw")))]
            if values == [None] * 3:
                continue
            fields = dict(size_bytes=_value(row.get("size"), f"{at}.size", True),
                          count=_value(row.get("count"), f"{at}.count", True, True),
                          type=_kind(row.get("type"), (str,), f"{at}.type"),
                          op=_kind(row.get("redop"), (str,), f"{at}.redop"),
                          in_place=in_place, time_us=values[0], algbw_gbps=values[1], busbw_gbps=values[2],
                          wrong=_value(place.get("nwrong"), f"{at}.{key}.nwrong", True, True))
            if "cpu_time" in place or graph:
                fields["time_source"] = "cpu" if "cpu_time" in place else "cuda_graph"
            if root is not None and root >= 0:
                fields["root"] = root
            out.append(_record(common, fields, line, cycles))
    return _cycles(out) + _nccl_events(doc, where, out, common)


def _nccl_events(doc, where, out, common):
    """A document whose footer is missing (the run ended early) and one whose footer says FAILED."""
    event = dict(run_id=common["run_id"], collective=common["collective"], hosts=common["hosts"],
                 source_file=common["source_file"], source_format=NCCL, source_line=None)
    errors = [e for e in _kind(doc.get("errors"), (list,), f"{where} errors") or [] if isinstance(e, str) and e]
    said = f"; nccl-tests says: {shown(errors[0], 300)}" if errors else "; the file shows no reason"
    bounds = _kind(doc.get("out_of_bounds"), (dict,), f"{where} out_of_bounds")
    name = common["collective"] or "the"
    if bounds is None:
        return [schema.event("commbench", "truncated", f"{name} results end after {len(out)} measurement(s) without "
                             f"nccl-tests' footer (out_of_bounds){said}", **event)]
    failed = _value(bounds.get("count"), f"{where} out_of_bounds.count", True, True)
    if failed:
        return [schema.event("commbench", "failed", f"nccl-tests: Out of bounds values : {failed} FAILED "
                             f"({common['collective']})", **event)]
    return []


def _csv(text):
    """rccl-tests' CSV rows as its JSON objects: the header's names as the JSON's keys, numbers as numbers."""
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise UserError(f"rccl-tests CSV that is not CSV: {shown(str(exc), 80)}") from None
    keys = [CSV_KEYS.get(k, k) for k in rows[0]]
    return [dict(zip(keys, map(_cell, row))) for row in rows[1:] if row]


def _cell(text):
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


def _rccl(doc, lines, path, run_id, option, fmt):
    where, from_file, out, cycles = {RCCL: "rccl-tests JSON", RCCL_CSV: "rccl-tests CSV"}[fmt], \
        names.in_file_name(path), [], {}
    for i, (row, line) in enumerate(zip(doc, lines)):
        at = f"{where}{f' line {line}' if line else ''} [{i}]"
        row = _kind(row, (dict,), at, False)
        name = _kind(row.get("name"), (str,), f"{at}.name")
        collective = names.named(name) or option or (from_file[0] if len(from_file) == 1 else None)
        if collective is None:
            raise UserError(names.unnamed(path, from_file, "its name is none"))
        count = {k: _value(row.get(k), f"{at}.{k}", True, True) for k in ("gpus", "ranksPerNode", "gpusPerRank")}
        mpi = count["ranksPerNode"] is not None    # its processes in the communicator; "nodes" counts communicators
        common = dict(run_id=run_id, collective=collective, backend="nccl", source_file=path, source_format=fmt,
                      world_size=count["ranksPerNode"] * (count["gpusPerRank"] or 1) if mpi else count["gpus"],
                      nodes=None if mpi else 1)
        fields = dict(size_bytes=_value(row.get("size"), f"{at}.size", True),
                      type=_kind(row.get("type"), (str,), f"{at}.type"),
                      op=_kind(row.get("redop"), (str,), f"{at}.redop"),
                      in_place=bool(_value(row.get("inPlace"), f"{at}.inPlace", True)),
                      time_us=_value(row.get("time"), f"{at}.time", null=True),
                      algbw_gbps=_value(row.get("algBw"), f"{at}.algBw", null=True),
                      busbw_gbps=_value(row.get("busBw"), f"{at}.busBw", null=True),
                      wrong=_value(row.get("wrong"), f"{at}.wrong", True, True))
        rec = _record(common, fields, line, cycles)
        rec["cycle"] = _value(row.get("numCycle"), f"{at}.numCycle", True, True) or 0   # the writer's own count
        out.append(rec)
    return _cycles(out)
