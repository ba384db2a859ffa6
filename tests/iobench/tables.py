"""Reads the tables iobench prints (benchcore.report.render's compact look: a title, headers over one or more lines,
a rule of '─', rows, columns two spaces apart) back into cells, wherever rich placed the columns."""
from dataclasses import dataclass


@dataclass
class Table:
    title: str
    header: tuple      # each column's header, its lines joined by a space
    rows: list         # [[cells] per row]; a row's folded lines joined into its cells


def compact_tables(stdout):
    """Every table in stdout (each with a title of one line). A row starts at its line's first character; a line
    that starts blank continues the row above (a folded cell); the gaps between columns are the runs of two or
    more positions blank in every header line and row."""
    lines = stdout.splitlines()
    found, after = [], -1   # after: the last line of the table before
    for at, rule in enumerate(lines):
        if not rule.strip() or set(rule.strip()) != {"\u2500"}:
            continue
        width = len(rule)
        gaps = set(range(width))

        def keeps(line):
            return len(line) <= width and all(line.ljust(width)[p] == " " for p in gaps)

        def fill(line):   # the positions it fills are no gap
            gaps.difference_update(p for p, c in enumerate(line) if c != " ")

        fill(lines[at - 1])
        body = []   # rows, each a list of its lines (a folded cell continues on a line that starts blank)
        for line in lines[at + 1:]:
            if len(line) != width or not line.strip() or set(line.strip()) == {"\u2500"}:
                break   # rich pads every line of a table to its width: a note under it is not padded
            if not line[0].isspace():
                fill(line)
                body.append([line])
            elif body and keeps(line):
                body[-1].append(line)
            else:
                break   # the next table's title
        top = at - 1   # the title (one line) and the header's lines above the rule, each padded to the width
        while top - 1 > after and len(lines[top - 1]) == width and lines[top - 1].strip():
            top -= 1
        title, top = (lines[top].strip(), top + 1) if top < at - 1 else ("", top)
        for line in lines[top:at - 1]:
            fill(line)
        after = at + sum(map(len, body))
        gaps = {p for p in gaps if {p - 1, p + 1} & gaps}   # columns are two spaces apart; a cell's words one
        spans, start = [], None
        for p in range(width + 1):
            if p < width and p not in gaps and start is None:
                start = p
            elif (p == width or p in gaps) and start is not None:
                spans.append((start, p))
                start = None

        def cells(line):
            return [line.ljust(width)[a:b].strip() for a, b in spans]

        header = tuple(" ".join(part for part in column if part) for column in zip(*map(cells, lines[top:at])))
        rows = [[" ".join(part for part in column if part) for column in zip(*map(cells, row))] for row in body]
        found.append(Table(title, header, rows))
    return found


def shown_mounts(stdout, mounts):
    """{mount: its name in the tables}, read from the line under them that gives each mount's file system
    ('NAME is /full/path: xfs, ...' where the table names it shorter, '/full/path: xfs, ...' where it shows it)."""
    names = {}
    for mount in map(str, mounts):
        line = next(ln for ln in stdout.splitlines() if ln.startswith(f"{mount}: ") or f" is {mount}: " in ln)
        names[mount] = mount if line.startswith(f"{mount}: ") else line.split(f" is {mount}: ")[0]
    return names
