"""The import graph has no cycles, function-local imports included (docs/architecture.md).

import-linter's layer contracts (pyproject.toml, run by scripts/test) keep layers apart; this
also catches a cycle between two modules of one layer, which no layer contract sees.
"""

import grimp

PACKAGES = ("farm", "coordinator", "agent", "foundation")


def import_cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("a", "b", "c", "d"):
        graph.add_module(name)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_back():
    graph = grimp.build_graph(*PACKAGES)
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (break them along the layers of docs/architecture.md):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles)
