"""Modules and commands imported on first use, so a command line that never measures never pays for torch (~2 s)
and one command does not pay for the others."""
import importlib

import click


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
