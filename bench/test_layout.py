"""bench/'s shape, read from its imports: no private pyfastdec names (pyfastdec.kernels is
the public way to the engine's primitives), no import circle, and the one-off studies
(bench/studies/) stay out of what bench.run and the documented benchmarks import."""
from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def _modules() -> dict[str, Path]:
    """'bench.x' / 'bench.studies.y' -> file, for every Python file under bench/."""
    return {".".join(path.relative_to(BENCH.parent).with_suffix("").parts): path
            for path in sorted(BENCH.rglob("*.py")) if "__pycache__" not in path.parts}


def _imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module, [names]) per import statement anywhere in the file (function bodies too:
    bench imports lazily), relative imports resolved against `name`."""
    package = name.rsplit(".", 1)[0] if path.name != "__init__.py" else name
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names]))
    return found


def _bench_edges() -> dict[str, set[str]]:
    """bench module -> the bench modules it imports ('from bench import x' names module x)."""
    modules = _modules()
    edges = {name: set() for name in modules}
    for name, path in modules.items():
        for module, names in _imports(name, path):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules] or [module]
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def test_no_private_pyfastdec_names():
    offending = []
    for name, path in _modules().items():
        for module, names in _imports(name, path):
            if module.split(".")[0] != "pyfastdec":
                continue
            private = [part for part in module.split(".")[1:] + names if part.startswith("_")]
            if private:
                offending.append(f"{path.relative_to(BENCH.parent)}: {module} {', '.join(private)}")
    assert not offending, "bench imports private pyfastdec names:\n" + "\n".join(offending)


def test_no_import_circle():
    edges = _bench_edges()
    circles = []

    def visit(node, trail):
        for nxt in sorted(edges[node]):
            if nxt in trail:
                circles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in done:
                visit(nxt, trail + [nxt])
        done.add(node)

    done: set[str] = set()
    for start in sorted(edges):
        if start not in done:
            visit(start, [start])
    assert not circles, "import circles in bench/:\n" + "\n".join(circles)


def test_studies_stay_out_of_the_harness():
    edges = _bench_edges()
    harness = [name for name in edges if not name.startswith("bench.studies")]
    leaks = [f"{name} -> {target}" for name in harness for target in sorted(edges[name])
             if target.startswith("bench.studies")]
    assert not leaks, "bench modules outside studies/ import a study:\n" + "\n".join(leaks)
    assert (BENCH / "studies" / "__init__.py").is_file()
