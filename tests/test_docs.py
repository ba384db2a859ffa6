"""The docs cannot drift from the code: the generated reference (docs/reference/) is what scripts/gen-reference
makes from the code now, every command line in the README's and docs' examples parses against that command's own
options (click's parser: the option names, their values, the arguments' count), the examples the docs time at a
few seconds here run as written, every page the README links to exists, and the README stays short."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
GUIDE = [p for p in PAGES if "reference" not in p.parts]


def _tools():
    from commbench.commands.cli import cli as commbench_cli
    from iobench.cli import cli as iobench_cli
    return {"commbench": commbench_cli, "iobench": iobench_cli}


def examples(page):
    """(line number, command line) of every commbench/iobench line in page's fenced blocks, `\\` continuations
    joined, comments and shell redirections cut, `[--opt]` (optional, as usage lines write it) unbracketed."""
    out, fenced, pending = [], False, None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced, pending = not fenced, None
            continue
        if not fenced:
            continue
        if pending:
            pending = (pending[0], pending[1] + " " + line.strip())
        elif re.match(r"\s*(commbench|iobench) ", line):
            pending = (number, line.strip())
        else:
            continue
        if pending[1].endswith("\\"):
            pending = (pending[0], pending[1][:-1])
            continue
        text = re.split(r"\s#\s|\s#$", pending[1])[0]
        text = re.split(r"\s(?:>|2>|\||&&|;)\s", text)[0]
        out.append((pending[0], text.replace("[", "").replace("]", "")))
        pending = None
    return out


def resolve(words):
    """The click command a command line names, its words, and the rest of the line."""
    group = _tools()[words[0]]
    ctx = click.Context(group, info_name=words[0])
    cmd, rest = group, words[1:]
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"no command {rest[0]!r} under {ctx.command_path}"
        ctx = click.Context(sub, info_name=rest[0], parent=ctx)
        cmd, rest = sub, rest[1:]
    return cmd, ctx, rest


ALL = [(page, number, line) for page in GUIDE for number, line in examples(page)]


def test_the_docs_show_examples_of_every_command():
    shown = {" ".join(w for w in shlex.split(line)[:2] if not w.startswith("-")) for _, _, line in ALL}
    for tool, group in _tools().items():
        ctx = click.Context(group, info_name=tool)
        missing = [f"{tool} {name}" for name in group.list_commands(ctx)
                   if f"{tool} {name}" not in shown]
        assert not missing, f"commands no page shows an example of: {missing}"


@pytest.mark.parametrize("page,number,line", ALL, ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in ALL])
def test_every_example_parses_against_its_command(page, number, line):
    cmd, ctx, rest = resolve(shlex.split(line))
    opts, args, _ = cmd.make_parser(ctx).parse_args(list(rest))   # raises on an unknown option or a missing value
    arguments = [p for p in cmd.params if isinstance(p, click.Argument)]
    most = None if any(p.nargs == -1 for p in arguments) else sum(p.nargs for p in arguments)
    assert most is None or len(args) <= most, f"{len(args)} arguments where {ctx.command_path} takes {most}"


def test_every_page_the_readme_and_docs_link_exists():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).resolve().exists(), f"{page.relative_to(ROOT)} links {target}"


def test_the_readme_is_short_and_reaches_every_guide_page_in_one_click():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    for page in (ROOT / "docs" / "guide").glob("*.md"):
        assert f"docs/guide/{page.name}" in text, page.name


@pytest.mark.slow
def test_the_committed_reference_is_what_the_code_generates():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-reference"), "--check"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


CLAIM = re.compile(r"(?:under 1|~(\d+)) s here")
INPUTS = re.compile(r"[\w.-]*/[\w./-]*|[\w.-]+\.(?:log|jsonl|yaml|fio|json)\b")
OUTPUTS = ("--out", "--metrics", "--plot", ">")


def quick_examples():
    """(page, line number, line as written) of the examples a page says take at most 5 s here, not marked root."""
    out = []
    for page in GUIDE:
        fenced = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced
                continue
            claim = CLAIM.search(line)
            if fenced and claim and re.match(r"(commbench|iobench) ", line) and "root" not in line.split("#", 1)[-1] \
                    and int(claim.group(1) or 0) <= 5:
                out.append((page, number, line.split(" #", 1)[0].strip()))
    return out


QUICK = quick_examples()


@pytest.mark.slow
@pytest.mark.parametrize("page,number,line", QUICK, ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in QUICK])
def test_the_examples_timed_at_seconds_here_run_as_written(page, number, line, tmp_path):
    """Run from a scratch directory that sees the repository's acceptance/, topologies/ and tests/ (the paths the
    examples name); an example naming an input this machine lacks (a user's log, a mount) is checked for syntax only
    (above), and says so."""
    words = shlex.split(line)
    outputs = {words[i + 1] for i, w in enumerate(words[:-1]) if w in OUTPUTS}
    missing = [w for w in words if INPUTS.fullmatch(w) and w not in outputs and not (ROOT / w).exists()
               and not w.startswith(("acceptance/", "topologies/", "tests/"))]
    if missing:
        pytest.skip(f"names inputs this machine lacks ({', '.join(missing)}): its syntax is checked above")
    for name in ("acceptance", "topologies", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"})
    assert done.returncode == 0, f"{page.relative_to(ROOT)}:{number}: {line}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
