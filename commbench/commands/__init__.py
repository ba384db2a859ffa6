"""The command line: the click group (cli.py) and one module per command."""
