"""User errors end as one clear line and a non-zero exit, never a traceback; text from a user's file or a host
reaches that line short and without a terminal escape (shown, name, key). Standard library only: the emulation
scripts run under the system python3."""
import os
import re
import signal
import sys


class UserError(Exception):
    """Something the user can fix: bad input, missing tool, unusable mount."""


class WriteFailed(UserError):
    """An output file that could not be written (a full or read-only file system): which file, and why."""

    def __init__(self, message, filename, why):
        super().__init__(message)
        self.filename, self.why = filename, why


EXCERPT_CHARS = 200
_KEY = re.compile(r"[A-Za-z_]\w{0,39}(\.[A-Za-z_]\w{0,39})?", re.ASCII)   # a key, or SECTION.key
# C0 controls but tab, DEL, C1 controls, and whole ESC sequences (CSI ... final byte, OSC ... BEL or ST)
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x9b[0-?]*[ -/]*[@-~]|"
                      r"\x9d[^\x07\x9c]*[\x07\x9c]?|\x1b.?|[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def printable(text):
    """text with every escape sequence and control character (tab kept) a space: nothing in it can move a
    terminal's cursor, retitle its window or start a new line."""
    return _ESCAPES.sub(" ", str(text))


def shown(text, limit=EXCERPT_CHARS):
    """text as it may reach a terminal: printable(), at most limit chars."""
    clean = printable(text)
    return clean if len(clean) <= limit else clean[:limit - 3] + "..."


def key(value):
    """A mapping's key as an error may quote it: a name (letters, digits, _; at most 40) in quotes, anything else
    (a line of another kind of file, '/etc/shadow's 'root:$6$...:') not at all."""
    return repr(value) if isinstance(value, str) and _KEY.fullmatch(value) else "(a key that is not a name, not shown)"


def name(path):
    """A path as an error line may show it (a name holding a newline or an escape stays one line)."""
    return shown(os.fspath(path), 300)


EXIT_USAGE = 2


def run_cli(group):
    """Entry point wrapper: UserError -> 'error: ...' on stderr, exit 2; Ctrl-C -> exit 130.

    SIGTERM becomes SystemExit(143), so clean-up in finally blocks runs as on Ctrl-C.
    """
    import click  # here, so that benchcore.units stays standard-library only (scripts/ use it)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        group.main(standalone_mode=False)
    except UserError as exc:
        click.echo(f"error: {printable(exc)}", err=True)
        sys.exit(EXIT_USAGE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


def spelled():
    """{parameter name: the option as the user spelled it (--flag; -r/--root where the first spelling is a letter)}
    of every option the command line set; {} outside a click command."""
    import click
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    return {p.name: "/".join(p.opts[:2]) if not p.opts[0].startswith("--") else p.opts[0] for p in ctx.command.params
            if ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE}


def given(*names):
    """The options among names (parameter names) that the command line set, as the user spelled them; [] outside a
    click command."""
    return [text for name, text in spelled().items() if name in names]


def refuse_given(names, why):
    """Options the command line set that would be silently ignored: UserError '--a, --b: why' (one line)."""
    found = given(*names)
    if found:
        raise UserError(f"{', '.join(found)}: {why}")
