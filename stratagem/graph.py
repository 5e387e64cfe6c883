"""Pure graph helpers over a plan's `depends_on` edges."""

from __future__ import annotations

from typing import Iterable, Mapping


def find_cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every elementary cycle reached by a depth-first walk, each as [a, b, ..., a].

    `edges[x]` are the nodes x depends on. Edges to unknown nodes are ignored (they are
    reported separately as missing dependencies). Each cycle is reported once, rotated to
    start at its smallest id so the message is stable.
    """
    white, grey, black = 0, 1, 2
    colour = {node: white for node in edges}
    stack: list[str] = []
    seen: set[tuple[str, ...]] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        colour[node] = grey
        stack.append(node)
        for dep in edges[node]:
            if dep not in colour:
                continue
            if colour[dep] == grey:
                cycle = stack[stack.index(dep):]
                start = cycle.index(min(cycle))
                rotated = tuple(cycle[start:] + cycle[:start])
                if rotated not in seen:
                    seen.add(rotated)
                    cycles.append([*rotated, rotated[0]])
            elif colour[dep] == white:
                visit(dep)
        stack.pop()
        colour[node] = black

    for node in edges:
        if colour[node] == white:
            visit(node)
    return cycles


def ancestors(edges: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """For each node, every node it depends on directly or transitively. Assumes no cycles."""
    memo: dict[str, set[str]] = {}

    def of(node: str) -> set[str]:
        if node not in memo:
            result: set[str] = set()
            for dep in edges.get(node, ()):
                if dep in edges:
                    result.add(dep)
                    result |= of(dep)
            memo[node] = result
        return memo[node]

    for node in edges:
        of(node)
    return memo


def sinks(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """Nodes nothing else depends on, in the mapping's order."""
    depended = {dep for deps in edges.values() for dep in deps}
    return [node for node in edges if node not in depended]


def topological_order(edges: Mapping[str, Iterable[str]]) -> list[str]:
    """A stable topological order (dependencies first). Assumes no cycles."""
    order: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        done.add(node)
        for dep in edges.get(node, ()):
            if dep in edges:
                visit(dep)
        order.append(node)

    for node in edges:
        visit(node)
    return order
