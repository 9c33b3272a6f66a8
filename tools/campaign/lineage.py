"""An experiment's parent and the path to the best: the tree a campaign grew, read from its ledger
rows alone (no I/O).

A node is one experiment: the rows of one commit, joined with the reruns that name one of them
(`rerun_of`); its key is the index of its first row. A rerun is never a node of its own: it is one
more run of its experiment, pooled by the noise rule (`noise.groups`, under the fingerprint of the
experiment's latest finished run), and the rerun that kept a candidate is named (`confirmed_by`).
A retry (a fix-up after a crash) is another commit, so another node, beside the one it retries.

A node's parent is the experiment whose commit its first row branched from (`parent_commit`). A
row without one (written by hand, or by a tool that kept no parents) grew from the best before it,
as `--parent best` would have made it; a parent commit that no row holds (the commit the baseline
started from, any other git ref) makes the node a root. The tree is a forest: a link that would
close a circle (hand-written rows: git has none) is left out.

The chain of improvements is the path from the root down to the best (`Tree.path_to`): each link
the experiment the next one grew from. Kept experiments beside it are branches off the link they
grew from (`branches`), never links.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from autoresearch_skills.campaign import noise
from autoresearch_skills.ledger import Row
from autoresearch_skills.outcome import Status


def is_candidate(row: Row) -> bool:
    """The row is a noise-rule candidate: written `discard`, flagged until a rerun decides it."""
    return noise.CANDIDATE_FLAG in {f.strip() for f in re.split(r"[;,]", row.flags)}


@dataclass
class Node:
    """One experiment and where it sits in the tree."""

    key: int  # index of its first row
    rows: list[Row]  # every row of the experiment, in index order: its runs, reruns, crashed ones
    group: noise.Group | None  # its finished runs pooled; None when none gave a metric
    parent: int | None = None  # key of the experiment it grew from; None for a root
    children: list[int] = field(default_factory=list)  # keys, in index order

    @property
    def first(self) -> Row:
        return self.rows[0]

    @property
    def name(self) -> str:
        """The branch's last part: `lr` for `autoresearch/x/lr`."""
        return self.first.branch.rsplit("/", 1)[-1] or f"#{self.key}"

    @property
    def status(self) -> Status:
        """Keep once one of its runs was kept (as `noise.best` counts it), a candidate while its
        latest run awaits a rerun, discard when its runs gave a metric, else its latest row's."""
        if self.group is None:
            return self.rows[-1].status
        if self.group.kept:
            return Status.KEEP
        return Status.CANDIDATE if self.group.candidate else Status.DISCARD

    @property
    def kept(self) -> bool:
        return self.status is Status.KEEP

    @property
    def value(self) -> float | None:
        """The mean of its pooled runs; None without a metric."""
        return self.group.mean if self.group else None

    @property
    def runs(self) -> int:
        return self.group.n if self.group else 0

    @property
    def candidate_row(self) -> int | None:
        """The first of its rows recorded as a candidate, if any."""
        return next((r.index for r in self.rows if is_candidate(r)), None)

    @property
    def confirmed_by(self) -> int | None:
        """The row that kept it after it was first recorded as a candidate (its confirming rerun);
        None when it was never a candidate or is not kept."""
        flagged = self.candidate_row
        if flagged is None or not self.kept:
            return None
        return next((r.index for r in self.rows if r.index > flagged and r.status is Status.KEEP), None)

    @property
    def retry_of(self) -> int | None:
        """The crashed or timed-out row this experiment's fix-up retries."""
        return int(self.first.retry_of) if self.first.retry_of.isdigit() else None

    def to_json(self, tree: Tree) -> dict:
        """The node and, nested, its children: what `ars campaign tree --json` prints."""
        return {
            "index": self.key,
            "branch": self.first.branch,
            "name": self.name,
            "commit": self.first.commit,
            "parent_commit": self.first.parent_commit,
            "status": str(self.status),
            "metric_value": self.value,
            "runs": self.runs,
            "indexes": list(self.group.indexes) if self.group else [],
            "rows": [r.index for r in self.rows],
            "confirmed_by": self.confirmed_by,
            "retry_of": self.retry_of,
            "cause": "" if self.group else str(self.rows[-1].cause or ""),
            "description": self.first.description,
            "children": [tree.nodes[k].to_json(tree) for k in self.children],
        }


@dataclass
class Tree:
    """Every experiment of a ledger, by key, and which experiment each row belongs to."""

    nodes: dict[int, Node]  # by key, in index order
    owner: dict[int, int]  # row index -> the key of its experiment

    @property
    def roots(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.parent is None]

    def node_of(self, index: int) -> Node | None:
        """The experiment that holds row `index`."""
        key = self.owner.get(index)
        return None if key is None else self.nodes[key]

    def path_to(self, index: int) -> list[Node]:
        """The experiment holding row `index` and those it grew from, its root first."""
        node = self.node_of(index)
        path = []
        while node is not None:
            path.append(node)
            node = None if node.parent is None else self.nodes[node.parent]
        return path[::-1]

    def walk(self) -> Iterator[tuple[int, Node]]:
        """(depth, node), depth first, each root in index order, children in index order."""
        stack = [(0, n) for n in reversed(self.roots)]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, self.nodes[k]) for k in reversed(node.children))


def build(rows: Sequence[Row], direction: str) -> Tree:
    """The tree of the experiments in `rows` (`direction`, min or max, picks the best a row without
    a parent commit grew from)."""
    ordered = sorted(rows, key=lambda r: r.index)
    union = {r.index: r.index for r in ordered}

    def root(i: int) -> int:
        while union[i] != i:
            union[i] = union[union[i]]
            i = union[i]
        return i

    def join(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        union[max(ra, rb)] = min(ra, rb)  # the earliest row names the experiment

    first_of_commit: dict[str, int] = {}
    for r in ordered:
        if r.commit:
            join(r.index, first_of_commit.setdefault(r.commit, r.index))
        if r.rerun_of.isdigit() and int(r.rerun_of) in union:
            join(r.index, int(r.rerun_of))
    members: dict[int, list[Row]] = {}
    for r in ordered:
        members.setdefault(root(r.index), []).append(r)
    nodes = {key: Node(key, rs, _pooled(rs)) for key, rs in members.items()}
    tree = Tree(nodes, {r.index: root(r.index) for r in ordered})
    holder = {commit: root(index) for commit, index in first_of_commit.items()}
    for node in nodes.values():
        parent = _parent_of(node, tree, holder, direction)
        if parent is not None and node.key not in [n.key for n in tree.path_to(parent.key)]:
            node.parent = parent.key
            parent.children.append(node.key)
    for node in nodes.values():
        node.children.sort()
    return tree


def branches(tree: Tree, path: list[Node]) -> dict[int, list[tuple[int, Node]]]:
    """The kept experiments beside the path, under the link they grew from: for each link's key,
    (depth, node) depth first, depth 1 for one whose nearest kept forebear is the link, 2 for one
    that grew from such a branch, and so on; experiments not kept are passed through, not shown."""
    on_path = {n.key for n in path}
    found: dict[int, list[tuple[int, Node]]] = {}
    for link in path:
        shown: list[tuple[int, Node]] = []
        stack = [(1, tree.nodes[k]) for k in reversed(link.children) if k not in on_path]
        while stack:
            depth, node = stack.pop()
            if node.kept:
                shown.append((depth, node))
            below = depth + 1 if node.kept else depth
            stack.extend((below, tree.nodes[k]) for k in reversed(node.children))
        found[link.key] = shown
    return found


def lines(tree: Tree, best: int | None = None) -> list[str]:
    """The tree as text, two spaces per generation: `#4 lr: keep 0.987500 (2 runs, confirmed by
    #5)`; `best` (a row index) marks the experiment that holds it."""
    best_key = tree.owner.get(best) if best is not None else None
    first = min(tree.nodes, default=None)
    out = []
    for depth, node in tree.walk():
        details = [f"{node.runs} run{'s' if node.runs != 1 else ''}"] if node.group else []
        if node.rows[-1].cause and node.group is None:
            details.append(str(node.rows[-1].cause))
        if node.confirmed_by is not None:
            details.append(f"confirmed by #{node.confirmed_by}")
        if node.retry_of is not None:
            details.append(f"retries #{node.retry_of}")
        if node.parent is None and node.key != first and node.first.parent_commit:
            details.append(f"grew from {node.first.parent_commit[:8]}, which no row holds")
        line = f"{'  ' * depth}#{node.key} {node.name}: {node.status}"
        line += f" {node.value:.6f}" if node.value is not None else ""
        line += f" ({', '.join(details)})" if details else ""
        out.append(line + (" <- best" if node.key == best_key else ""))
    return out


def _pooled(rows: list[Row]) -> noise.Group | None:
    """The pooled runs of one experiment: those of its latest finished run's fingerprint."""
    found = noise.groups(rows)
    latest = next((r.index for r in reversed(rows) if r.status in noise.FINISHED), None)
    return next((g for g in found.values() if latest in g.indexes), None)


def _parent_of(node: Node, tree: Tree, holder: dict[str, int], direction: str) -> Node | None:
    """The experiment `node` branched from: the one holding its parent commit (`holder`: commit ->
    key); for a row with no parent commit, the best before it; None when no row holds the commit."""
    first = node.first
    if first.parent_commit:
        key = holder.get(first.parent_commit)
        parent = None if key is None else tree.nodes[key]
    else:
        before = [r for n in tree.nodes.values() for r in n.rows if r.index < first.index]
        best = noise.best(before, direction)
        parent = tree.node_of(best.key) if best else None
    return None if parent is node else parent
