"""`commbench env`: the variables commbench sweep knows, what values each takes and which backend reads it."""
import click

from benchcore.report.render import print_table
from commbench.transports.envvars import CATALOGUE, read_by


@click.command(name="env")
def env_catalogue():
    """List the NCCL / PyTorch / Gloo variables commbench sweep knows.

    \b
    Example:
      commbench env
    """
    rows = []
    for var in CATALOGUE.values():
        allowed = list(var.choices or []) + ([f"{var.int_range[0]}..{var.int_range[1]}"] if var.int_range else [])
        text = ", ".join(allowed) or ("a path (a spec: allow_paths)" if var.path else "text")
        rows.append({"label": var.name, "allowed": f"list of {text}; ^, coll:" if var.listed else text,
                     "read_by": ", ".join(read_by(var.name)), "meaning": var.meaning})
    print_table(rows, [("label", "variable", None), ("allowed", "values", None), ("read_by", "read by", None),
                       ("meaning", "meaning", None)],   # a name is never wrapped; values and meaning wrap to fit
                title="commbench sweep: known variables (a variable its backend does not read changes nothing)")
