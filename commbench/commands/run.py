"""run and ring: collectives over a size sweep, nccl-tests style (commbench/runner.py measures)."""
import sys

import click

from benchcore.errors import UserError
from benchcore.inputs import shown
from commbench.cases.registry import COLLECTIVE_NAMES, parse_names
from commbench.commands.judge import run_verdict
from commbench.commands.options import PLACES, launch_options, measure_options, parse
from commbench.runner import measure


@click.command()
@click.option("--collective", "collectives", default="all_reduce", show_default=True,
              help="Comma list: " + ",".join(COLLECTIVE_NAMES))
@click.option("--place", type=click.Choice(list(PLACES)), default="both", show_default=True,
              help="Out-of-place, in-place or both, where torch.distributed offers the variant.")
@click.option("--judge", "judged", is_flag=True,
              help="Judge each size's busbw against the --topology's references and model (commbench judge): a "
                   "verdict record after the measurements, exit 1 when a size fails.")
@measure_options()
@launch_options
def run(collectives, judged, **kw):
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
    opts, verdicts = parse(kw), []
    if judged and not opts.measure.topology:
        raise UserError("--judge needs --topology: the system whose references and model judge the numbers")
    judge = (lambda recs: verdicts.extend(run_verdict(recs, opts.measure.topology)) or verdicts) if judged else None
    measure(parse_names(collectives, "collective", "--collective"), opts, judge=judge)
    if verdicts and verdicts[-1]["passed"] is False:
        click.echo(f"error: verdict: {shown(verdicts[-1]['reason'], 1000)}", err=True)
        sys.exit(1)


@click.command()
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
    measure(["ring"], parse(kw), label="ring all_reduce")
