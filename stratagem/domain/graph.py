"""Pure graph helpers over a plan's `depends_on` edges.

All walks are iterative: they run inside workflow code, where a plan of thousands of steps
in one chain must not hit Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping


def find_cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Cycles found by a depth-first walk, each as [a, b, ..., a].

    `edges[x]` are the nodes x depends on. Edges to unknown nodes are ignored (they are
    reported separately as missing dependencies). Every graph with a cycle yields at least
    one; cycles sharing nodes with one already found may not be listed separately. Each is
    rotated to start at its smallest id, so the message is stable.
    """
    white, grey, black = 0, 1, 2
    colour = {node: white for node in edges}
    seen: set[tuple[str, ...]] = set()
    cycles: list[list[str]] = []
    for root in edges:
        if colour[root] != white:
            continue
        path: list[str] = [root]
        iterators = [iter(edges[root])]
        colour[root] = grey
        while iterators:
            dep = next(iterators[-1], None)
            if dep is None:
                colour[path.pop()] = black
                iterators.pop()
                continue
            if dep not in colour:
                continue
            if colour[dep] == grey:
                cycle = path[path.index(dep) :]
                start = cycle.index(min(cycle))
                rotated = tuple(cycle[start:] + cycle[:start])
                if rotated not in seen:
                    seen.add(rotated)
                    cycles.append([*rotated, rotated[0]])
            elif colour[dep] == white:
                colour[dep] = grey
                path.append(dep)
                iterators.append(iter(edges[dep]))
    return cycles


def topological_order(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """A stable topological order (dependencies first). Assumes no cycles."""
    order: list[str] = []
    done: set[str] = set()
    for root in edges:
        if root in done:
            continue
        done.add(root)
        stack = [(root, iter(edges[root]))]
        while stack:
            node, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                order.append(node)
                stack.pop()
            elif dep in edges and dep not in done:
                done.add(dep)
                stack.append((dep, iter(edges[dep])))
    return order


def ancestry(edges: Mapping[str, Iterable[str]]) -> Callable[[str, str], bool]:
    """`is_ancestor(node, target)`: whether `node` depends on `target`, directly or not.
    Assumes no cycles.

    Each node's ancestors are one integer used as a bit set, built in topological order, so a
    plan with thousands of steps and references is checked in a fraction of a second instead
    of one graph walk per reference.
    """
    order = topological_order(edges)
    index = {node: position for position, node in enumerate(order)}
    bits: dict[str, int] = {}
    for node in order:
        mask = 0
        for dep in edges[node]:
            if dep in index and dep != node:
                mask |= bits[dep] | (1 << index[dep])
        bits[node] = mask

    def is_ancestor(node: str, target: str) -> bool:
        return target in index and bool(bits.get(node, 0) >> index[target] & 1)

    return is_ancestor


def sinks(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Nodes nothing else depends on, in the mapping's order."""
    depended = {dep for deps in edges.values() for dep in deps}
    return [node for node in edges if node not in depended]
