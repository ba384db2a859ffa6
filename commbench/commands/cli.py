"""The commbench command line."""
import click

from benchcore.results import commands
from benchcore.errors import run_cli
from benchcore.lazy import LazyGroup

# command -> where it lives, imported when it runs
COMMANDS = {"run": "commbench.commands.run:run", "ring": "commbench.commands.run:ring",
            "chunked": "commbench.commands.compare:chunked", "compare": "commbench.commands.compare:compare",
            "overlap": "commbench.commands.overlap:overlap", "sweep": "commbench.commands.sweep:sweep",
            "env": "commbench.commands.sweep:env_catalogue", "selftest": "commbench.commands.selftest:selftest",
            "topo": "commbench.commands.topo:topo", "model": "commbench.commands.model:model",
            "accept": "commbench.commands.accept.command:accept", "p2p": "commbench.commands.p2p:p2p",
            "pairs": "commbench.commands.pairs:pairs"}


@click.group(cls=LazyGroup, lazy=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
def cli():
    """Collective-communication benchmarks: nccl-tests-grade numbers through torchrun.

    \b
    Example:
      commbench ring --nodes 2 -b 1K -e 64M
      commbench run --collective all_reduce,all_gather -b 8 -e 256M -f 2 --out results.jsonl
    """


commands.add_to(cli, "commbench")  # import, diff, report (benchcore)


def main():
    run_cli(cli)


if __name__ == "__main__":
    main()
