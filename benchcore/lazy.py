"""Modules imported on first use, so a command line that never measures never pays for torch (~2 s) (standard
library only: every rank imports it; the CLI's lazy commands are commbench/commands/cli.py's LazyGroup)."""
import importlib


class LazyModule:
    """Stands in for module `name` in its importer's globals until the first attribute access, which
    imports the module and puts the real one in its place: after that, no cost at all."""

    def __init__(self, name, importer_globals, alias):
        self._name, self._globals, self._alias = name, importer_globals, alias

    def __getattr__(self, attr):
        module = importlib.import_module(self._name)
        self._globals[self._alias] = module
        return getattr(module, attr)


def lazy(name, importer_globals, alias=None):
    """`torch = lazy("torch", globals())`, `dist = lazy("torch.distributed", globals(), "dist")`."""
    return LazyModule(name, importer_globals, alias or name)
