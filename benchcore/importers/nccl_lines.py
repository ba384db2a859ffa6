"""The logical lines of an nccl-tests/rccl-tests log as people keep them: mpirun --tag-output and srun --label
prefixes and Markdown's quotes ('> ') taken off, blank lines and Markdown fences left out, and NCCL INFO/WARN
lines that stdout buffering left inside a row split out of it (the row joined with its continuation)."""
import re

from benchcore.importers.nccl_table import NUMBER

# mpirun --tag-output and srun --label prefixes and Markdown's quote '> ', after the newline and any indent before
# them (a log pasted indented into a document: its lines are '    [1,0]<stdout>:#  size ...'; a block's lines are
# untagged at once)
TAG = re.compile(r"\n[^\S\n]*(?:\[\d+,\d+\]<(?:stdout|stderr)>:|\d+: |>(?=[ \n]))")
# host:pid:tid [dev] NCCL INFO (the host starts with a letter: inside a row it follows a digit). Each part is bounded
# (a host name has at most 253 characters), as NTHREAD's gap in nccl_reader: a search over a line of a MB stays linear.
NCCL_LOG = re.compile(r"[A-Za-z][\w.-]{0,252}:\d{1,10}:\d{1,10} \[\d{1,6}\] (?:[\w.]{1,64}:\d{1,6} )?(?:NCCL|RCCL) "
                      r"(?:INFO|WARN|TRACE|ABORT)")


def logical_lines(blocks):
    """(line number, words line, unterminated, logged) of a log given as text blocks that each end at a line's end
    (the last may not): each line without its mpirun/srun tag and surrounding blanks, blank lines and Markdown
    fences left out, NCCL log lines split out of rows they interrupted and the row joined with its continuation.
    unterminated: the last line of a log that ends without a newline; logged: the line is NCCL's own log line."""
    n, pending = 0, None
    for block in blocks:
        lines = TAG.sub("\n", "\n" + block).split("\n")[1:]
        open_end = lines[-1] != ""                         # only the log's last block can end without a newline
        if not open_end:
            lines.pop()
        end = n + len(lines)
        for line in lines:
            n += 1
            line = line.strip()
            if pending is None and "CCL " not in line:     # the common case: a line as printed
                if line and not line.startswith("```"):
                    yield n, line, open_end and n == end, False
                continue
            if not line or line.startswith("```"):
                continue
            m = NCCL_LOG.search(line) if "CCL " in line else None
            if m and m.start() > 0 and not line.startswith("#"):
                head = line[:m.start()].strip()
                if head and head.split()[0].isdigit():
                    pending = (n, head)                    # a row that an NCCL log line interrupted
                    yield n, line[m.start():], False, True
                    continue
            at = n
            if pending and not line.startswith("#") and all(NUMBER.match(t) or t.upper() == "N/A"
                                                            for t in line.split()):
                at, line, pending = pending[0], pending[1] + "  " + line, None
            elif pending and not m:
                yield pending[0], pending[1], True, False  # the row never continued: cut
                pending = None
            yield at, line, open_end and n == end, m is not None and at == n
    if pending:
        yield pending[0], pending[1], True, False
