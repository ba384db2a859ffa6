"""The commbench command line: its commands, imported when one runs (one command does not pay for the others)."""
import importlib

import click

from benchcore.errors import run_cli
from benchcore.results import commands
from benchcore.results.records import version_option

# command -> where it lives, imported when it runs
COMMANDS = {"run": "commbench.commands.run:run", "ring": "commbench.commands.run:ring",
            "chunked": "commbench.commands.chunked:chunked", "compare": "commbench.commands.compare:compare",
            "overlap": "commbench.commands.overlap:overlap", "sweep": "commbench.commands.sweep:sweep",
            "env": "commbench.commands.env:env_catalogue", "selftest": "commbench.commands.selftest:selftest",
            "topo": "commbench.commands.topo:topo", "model": "commbench.commands.model:model",
            "judge": "commbench.commands.judge:judge_command",
            "accept": "commbench.commands.accept.command:accept", "p2p": "commbench.commands.p2p:p2p",
            "pairs": "commbench.commands.pairs:pairs", "health": "commbench.commands.health:health",
            "node": "commbench.commands.node:node"}


class LazyGroup(click.Group):
    """A click group whose commands are imported when one runs (or help lists them), from a table of
    name -> "module:attribute": `commbench import` does not pay for the modules of every other command."""

    def __init__(self, *args, lazy=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name in self.lazy and name not in self.commands:
            module, attribute = self.lazy[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@version_option()
def cli():
    """Collective-communication benchmarks: nccl-tests-grade numbers through torchrun.

    \b
    Example:
      commbench ring --nodes 2 -b 1K -e 64M
      commbench run --collective all_reduce,all_gather -b 8 -e 256M -f 2 --out results.jsonl
    """


def report_judge(records, topology):
    """report --topology: commbench judge's verdict of the records on that system (imported when asked)."""
    from commbench.commands.judge import report_verdict
    return report_verdict(records, topology)


def report_notes(records):
    """report: each run's evidence of what ran (commbench/evidence/report.py), in the report's notes."""
    from commbench.evidence.report import evidence_events
    return evidence_events(records)


def import_evidence(path, fmt):
    """import: records of nccl-tests logs with NCCL INFO lines get their run's evidence (commbench/evidence/nccl.py)."""
    from commbench.evidence.nccl import import_evidence as evidence
    return evidence(path, fmt)


commands.add_to(cli, "commbench", judge=report_judge, notes=report_notes,   # import, diff, report (benchcore)
                enrich=import_evidence)


def main():
    run_cli(cli)


if __name__ == "__main__":
    main()
