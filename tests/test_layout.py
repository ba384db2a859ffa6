"""The layout shows the architecture (ARCHITECTURE.md): commbench and benchcore in subpackages, few modules at their
top, no import circle between the modules of the three packages (imports inside functions count), arrows only
downwards (benchcore imports neither tool, iobench not commbench), no name that only a flat folder needed, and no
reference to a document outside the repository. Long modules and functions are listed, not refused: a module is
split when it holds two concerns, never squeezed under a number."""
import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("commbench", "benchcore", "iobench")
LONG_MODULE = 400     # lines: worth a look for a second concern (printed, not refused)
LONG_FUNCTION = 80
MAX_TOP = 9
# what each package may import from the others: benchcore is the bottom, iobench a tool beside commbench
MAY_IMPORT = {"benchcore": set(), "iobench": {"benchcore"}, "commbench": {"benchcore", "iobench"}}
FLAT_FOLDER_NAMES = ("paircase", "acceptspec")   # and any name ending in "cmd"


def modules():
    """{dotted name: path} of every module of the three packages."""
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name, path, known):
    """The modules of the three packages that module `name` imports, anywhere in it (functions included)."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: from the module's own package
                anchor = name.split(".")[:len(name.split(".")) - node.level + is_pkg]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


def circles(graph):
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_commbench_is_split_into_subpackages_with_few_modules_at_its_top():
    top = ROOT / "commbench"
    subpackages = [d.name for d in top.iterdir() if (d / "__init__.py").exists()]
    assert len(subpackages) >= 4, subpackages
    assert len(list(top.glob("*.py"))) <= MAX_TOP, sorted(p.name for p in top.glob("*.py"))
    for d in subpackages:   # each says what it owns
        assert ast.get_docstring(ast.parse((top / d / "__init__.py").read_text())), d


def test_long_modules_and_functions_are_listed_for_a_look():
    """A warning list, printed with -s or -rA: what is long may hold two concerns."""
    for path in sorted(modules().values()):
        lines = len(path.read_text().splitlines())
        if lines > LONG_MODULE:
            print(f"long module: {path.relative_to(ROOT)} ({lines} lines)")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    (n := node.end_lineno - node.lineno + 1) > LONG_FUNCTION:
                print(f"long function: {path.relative_to(ROOT)}:{node.name} ({n} lines)")


def test_imports_run_downwards_between_the_packages():
    known = modules()
    up = sorted(f"{name} imports {target}" for name, path in known.items()
                for target in imports(name, path, known)
                if target.split(".")[0] != name.split(".")[0]
                and target.split(".")[0] not in MAY_IMPORT[name.split(".")[0]])
    assert not up, up


def test_benchcore_has_few_modules_at_its_top():
    top = ROOT / "benchcore"
    assert len(list(top.glob("*.py"))) <= MAX_TOP, sorted(p.name for p in top.glob("*.py"))
    for d in (d for d in top.iterdir() if (d / "__init__.py").exists()):
        assert ast.get_docstring(ast.parse((d / "__init__.py").read_text())), d


OUTSIDE = re.compile(r"DESIGN\.md|FIELD-NOTES|\.\./shared|shared/(DESIGN|FIELD|tools|hooks)")


def test_no_file_refers_to_a_document_outside_the_repository():
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if path.is_file() and path.suffix in (".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", "") \
                and name != "tests/test_layout.py":
            text = path.read_text(errors="replace")
            found += [f"{name}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert not found, found


def test_no_import_circle_counting_imports_inside_functions():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert not circles(graph), circles(graph)


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_name_that_only_a_flat_folder_needed():
    bad = [str(p.relative_to(ROOT)) for p in modules().values()
           if p.stem.endswith("cmd") or p.stem in FLAT_FOLDER_NAMES]
    assert not bad, bad
