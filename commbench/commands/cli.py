"""The commbench command line."""
import click

from benchcore import commands
from benchcore.errors import run_cli
from commbench.cases.registry import COLLECTIVE_NAMES, parse_names
from commbench.commands import compare, model, overlap, p2p, pairs, sweep, topo
from commbench.commands.accept import run as accept
from commbench.commands.selftest import selftest
from commbench.launch.spec import launch_options
from commbench.plan import PLACES, measure_options
from commbench.runner import measure


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
def cli():
    """Collective-communication benchmarks: nccl-tests-grade numbers through torchrun.

    \b
    Example:
      commbench ring --nodes 2 -b 1K -e 64M
      commbench run --collective all_reduce,all_gather -b 8 -e 256M -f 2 --out results.jsonl
    """


@cli.command()
@click.option("--collective", "collectives", default="all_reduce", show_default=True,
              help="Comma list: " + ",".join(COLLECTIVE_NAMES))
@click.option("--place", type=click.Choice(list(PLACES)), default="both", show_default=True,
              help="Out-of-place, in-place or both, where torch.distributed offers the variant.")
@measure_options()
@launch_options
def run(collectives, **kw):
    """Measure collectives over a size sweep (nccl-tests style).

    nccl-tests' flags mean what they mean there: -b -e -f sizes, -n -w iterations,
    -c check, -d type (all), -o op (all), -r root (all), -z blocking, -a aggregation,
    -m operations per iteration, -G CUDA graph replays, -C CPU time, -N cycles,
    -T timeout. nccl-tests picks the collective by binary; here it is --collective.

    \b
    Example:
      commbench run --collective all_reduce,all_gather -b 8 -e 256M -f 2 -n 20 -w 5 --out results.jsonl
      commbench run --collective reduce,broadcast -d all -o all -r all --nproc-per-node 3 -b 1K -e 1M
    """
    measure(parse_names(collectives, "collective", "--collective"), kw)


@cli.command()
@measure_options()
@launch_options
def ring(**kw):
    """Ring-AllReduce across nodes (all_reduce; NCCL_ALGO=Ring on NCCL).

    Without Slurm or --rdzv-endpoint, the nodes are emulated on this machine:
    N torchrun agents joined by a real c10d rendezvous on 127.0.0.1.

    \b
    Example:
      commbench ring --nodes 2 -b 1K -e 256M
      commbench ring --nodes 2 --rdzv-endpoint node0:29500 --node-rank 0   # on node0, then node-rank 1 on node1
    """
    measure(["ring"], kw, label="ring all_reduce")


cli.add_command(compare.chunked)
cli.add_command(compare.compare)
cli.add_command(overlap.overlap)
cli.add_command(sweep.sweep)
cli.add_command(sweep.env_catalogue)
cli.add_command(selftest)
cli.add_command(topo.topo)
cli.add_command(model.model)
cli.add_command(accept.accept)
cli.add_command(p2p.p2p)
cli.add_command(pairs.pairs)
commands.add_to(cli, "commbench")  # import, diff, report (benchcore)


def main():
    run_cli(cli)


if __name__ == "__main__":
    main()
