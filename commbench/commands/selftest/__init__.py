"""`commbench selftest`: checks of commbench itself against a physical truth on network-namespace nodes, one
module per check (link, model, overlap) over what they share (nodes.py)."""
import click

from commbench.commands.selftest import link, model, overlap


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def selftest():
    """Checks of commbench itself against known ground truth."""


selftest.add_command(link.link)
selftest.add_command(model.model_check)
selftest.add_command(overlap.overlap_check)
