"""The result branch: one commit a researcher reviews in the morning, the campaign's best
configuration against the commit the night started from (`ars campaign finish --branch NAME`).

Contract:
    make(campaign, name, force=False)   branch NAME holds ONE commit, whose parent is the start and
                                        whose tree is the best commit's tree: `git diff START NAME`
                                        is the best's change, `git diff BEST NAME` is empty. The
                                        message says the gain, the chain of kept changes, the
                                        baseline, the best and its claim, the held-out value and
                                        the ledger's path.
    check(campaign, name, force=False)  the refusals alone, nothing written: the caller asks before
                                        it does anything else, so a refused command changes nothing.

The start is the baseline's parent commit (the first baseline row's `parent_commit`): the commit
the checkout was on when the baseline was recorded, the one every experiment grew from. state.json
keeps only the name of the branch the campaign started on (`home_branch`), and that branch may have
moved on since; the ledger row keeps the commit itself.

Nothing of the user's is touched: the commit is written with `git commit-tree` (an object: no index,
no working tree) and the branch set with `git update-ref`, compare-and-swap against what it held
(nothing, or the commit `--force` replaces), so HEAD, the index, tracked, untracked and ignored
files stay byte for byte as they were, and of two commands at once only one sets the branch.

Refused (exit 2): a name git does not take as a branch name; no best beyond the baseline (nothing
kept, or screening fell back to the baseline: there is no change to review); a branch of that name
that exists, unless `--force`; and even with it, a branch checked out somewhere (moving it would
change that checkout's files under it) or one whose last commit is not a result commit (it has no
`Ars-Campaign:` trailer): `--force` moves a result branch on, never a branch of someone's own work.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from autoresearch_skills import gitflow
from autoresearch_skills.campaign import confirmation, holdout, keeprule, lineage, noise, screening
from autoresearch_skills.campaign.finish import command_of_best, support_text
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.errors import BadInput
from autoresearch_skills.ledger import Row

CAMPAIGN_TRAILER = "Ars-Campaign"  # marks a result commit: `--force` moves only a branch whose tip has it
BEST_TRAILER = "Ars-Best"  # the best's commit, whose tree the result commit holds


@dataclass(frozen=True)
class ResultBranch:
    """A result branch as written: its name, its one commit, the start it sits on, the best's commit."""

    name: str
    commit: str
    start: str
    best: str
    replaced: str | None = None  # the commit the branch held before `--force` moved it
    files_changed: bool = True  # False: the best differs from the start only in its command's knobs

    def line(self) -> str:
        moved = f", moved from {self.replaced[:8]}" if self.replaced else ""
        line = (
            f"result branch: {self.name} @ {self.commit[:8]}{moved}: the best's change in one commit on "
            f"the start {self.start[:8]}; review it with `git show {self.name}`"
        )
        if not self.files_changed:
            line += (
                "; no file differs from the start: the best's change is its command-line knobs, "
                "written in the commit message"
            )
        return line

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "commit": self.commit,
            "start": self.start,
            "best": self.best,
            "replaced": self.replaced,
            "files_changed": self.files_changed,
        }


def check(campaign: Campaign, name: str, force: bool = False) -> tuple[str, noise.Best]:
    """The start commit and the best, or BadInput (exit 2) naming why no result branch can be made."""
    repo = campaign.repo
    # `@{-1}` and the like resolve to another branch's name: only a name written out is taken
    if gitflow.git(repo, "check-ref-format", "--branch", name, check=False) != name:
        raise BadInput(f"{name!r} is not a valid branch name (`git check-ref-format --branch`)")
    rows = campaign.rows()
    best = noise.best(rows, campaign.settings.direction)
    if best is None or any(r.is_baseline for r in rows if r.index == best.key):
        said = "nothing is kept yet" if best is None else "the best is the baseline"
        verdict = keeprule.verdict_line(campaign.settings, rows)
        raise BadInput(
            f"no result branch: {said}{f' ({verdict})' if verdict else ''}; there is no change to review"
        )
    start = start_commit(rows)
    if start is None:
        raise BadInput(
            f"no result branch: no baseline row in {campaign.ledger} names the commit it started from"
        )
    for commit, what in ((start, "start"), (best.commit, "best")):
        if not commit or not _exists(repo, commit):
            raise BadInput(f"no result branch: the {what} commit {commit[:12] or '(none)'} is not in {repo}")
    if gitflow.branch_exists(repo, name):
        _may_replace(repo, name, force)
    return start, best


def make(campaign: Campaign, name: str, force: bool = False) -> ResultBranch:
    """Write the result commit and point branch `name` at it (see the module's contract)."""
    repo = campaign.repo
    start, best = check(campaign, name, force)
    replaced = gitflow.head_commit(repo, f"refs/heads/{name}") if gitflow.branch_exists(repo, name) else None
    tree = gitflow.git(repo, "rev-parse", f"{best.commit}^{{tree}}")
    text = message(campaign, campaign.rows(), best, start)
    commit = gitflow.git(repo, "commit-tree", tree, "-p", start, "-m", text, env=gitflow.identity_env(repo))
    # the old value: "" for a branch that must not exist yet, so a branch another command set in
    # between is never overwritten; the reflog keeps what `--force` replaced
    reflog = f"ars campaign finish --branch: the result of {campaign.settings.name}"
    gitflow.git(repo, "update-ref", "-m", reflog, f"refs/heads/{name}", commit, replaced or "")
    same = gitflow.git(repo, "rev-parse", f"{start}^{{tree}}") == tree
    return ResultBranch(name, commit, start, best.commit, replaced, files_changed=not same)


def start_commit(rows: list[Row]) -> str | None:
    """The commit the campaign started from: the parent commit of its first baseline row."""
    return next((r.parent_commit for r in rows if r.is_baseline and r.parent_commit), None)


def message(campaign: Campaign, rows: list[Row], best: noise.Best, start: str) -> str:
    """The result commit's message: the gain on its subject line, then the chain of kept changes,
    the baseline, the best with its claim, the held-out value, the gains at a larger scale, the ledger;
    trailers last."""
    s = campaign.settings
    tree = lineage.build([r for r in rows if r.fingerprint == best.fingerprint], s.direction)
    base = _baseline(tree, rows, s.direction)
    if base is not None and base.value is not None:
        places = _places(base.value)  # both numbers to the baseline's places: `1.232 -> 1.100`
        said = ", ".join(filter(None, [_change(best.mean, base.value), _unclaimed(best)]))
        subject = f"{base.value:.{places}f} -> {best.mean:.{places}f} ({said})"
    else:
        subject = f"{best.mean:.{_places(best.mean)}f}"
    lines = [f"{s.name}: {s.metric} {subject}", ""]
    lines += [f"The best of campaign {s.name} against the commit it started from ({start[:12]}).", ""]
    lines.append("Chain of kept changes, from the baseline to the best:")
    before: lineage.Node | None = None
    for node in tree.path_to(best.key):
        lines.append(f"  {_link(node, before, s.metric)}")
        before = node
    lines.append("")
    if base is not None and base.value is not None:
        lines.append(f"baseline: {s.metric} {base.value:.6f} ({_runs(base)})")
    lines.append(f"best: {best.describe(s.metric)}{support_text(campaign, rows, best)}")
    claim = keeprule.verdict_line(s, rows)
    if claim:
        lines.append(f"verdict: {claim}")
    held = holdout.comparison(campaign, rows, best, run=False)  # holdout.json: the finish ran the command
    if held:
        lines.append(held)
    lines += confirmation.lines(rows, s.metric, s.direction)  # `confirm:`: the gains at the larger scale
    ran = command_of_best(campaign, best)
    if ran:
        lines.append(f"command: `{ran}`: its command-line knobs are in the command, not in these files")
    lines += [f"ledger: {_shown_path(campaign.ledger, campaign.repo)}", ""]
    lines += [f"{CAMPAIGN_TRAILER}: {s.name}", f"{BEST_TRAILER}: {best.commit}"]
    return "\n".join(lines) + "\n"


def _unclaimed(best: noise.Best) -> str:
    """What the subject line must say when the gain is not a claimed effect: `unconfirmed` (screening
    re-measured it and it did not hold), `not re-measured`, `one run` (nothing repeated it); "" else."""
    said = {
        screening.CLAIMS[screening.Outcome.SCREENED]: "unconfirmed",
        screening.CLAIMS[screening.Outcome.UNMEASURED]: "not re-measured",
    }
    if best.claim:
        return said.get(best.claim, "")
    return "one run" if best.n == 1 else ""


def _link(node: lineage.Node, before: lineage.Node | None, metric: str) -> str:
    """`#2 higher-lr (LR 0.01 -> 0.02): val_bpb 1.132000, -5.7% against #1 (1 run: #2)`."""
    about = noise.one_line(node.first.description)
    line = f"#{node.key} {node.name}" + (f" ({about})" if about and about != node.name else "")
    line += "" if node.kept else f" [{node.status}]"
    if node.value is None:
        return f"{line}: no metric"
    effect = ""
    if before is not None and before.value is not None:
        effect = f", {_change(node.value, before.value)} against #{before.key}"
    confirmed = f", confirmed by #{node.confirmed_by}" if node.confirmed_by is not None else ""
    return f"{line}: {metric} {node.value:.6f}{effect} ({_runs(node)}{confirmed})"


def _baseline(tree: lineage.Tree, rows: list[Row], direction: str) -> lineage.Node | None:
    """The baseline's experiment among the best's comparable rows; else among all the rows (an
    earlier fingerprint), so the message still says where the night started."""
    found = next((n for n in tree.nodes.values() if n.first.is_baseline and n.group), None)
    if found is None:
        others = lineage.build([r for r in rows if r.is_baseline], direction)
        found = next((n for n in others.nodes.values() if n.group), None)
    return found


def _runs(node: lineage.Node) -> str:
    """`1 run: #4`, `3 runs: #1, #2, #3`."""
    indexes = list(node.group.indexes) if node.group else []
    listed = ", ".join(f"#{i}" for i in indexes)
    return f"{len(indexes)} run{'s' if len(indexes) != 1 else ''}" + (f": {listed}" if listed else "")


def _places(value: float) -> int:
    """The decimal places that show `value` with four significant digits."""
    return max(0, 3 - math.floor(math.log10(abs(value)))) if value and math.isfinite(value) else 3


def _change(value: float, than: float) -> str:
    """The relative change, `-3.3%`; a small one with a digit more, so that it never reads `+0.0%`."""
    change = (value - than) / abs(than) if than else 0.0
    return f"{change:+.1%}" if abs(change) >= 0.001 else f"{change:+.2%}"


def _shown_path(path: Path, repo: Path) -> str:
    """The path from the repository's root when it lies inside it (where people look), else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(os.path.abspath(repo)))
    except ValueError:
        return str(absolute)


def _exists(repo: Path, commit: str) -> bool:
    return bool(gitflow.git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", check=False))


def _may_replace(repo: Path, name: str, force: bool) -> None:
    """An existing branch is moved only with `force`, only when no checkout has it, only a result branch."""
    if not force:
        raise BadInput(f"branch {name} already exists; `--force` moves it to a new result commit")
    held, here = [], ""
    for line in gitflow.git(repo, "worktree", "list", "--porcelain").splitlines():
        here = line.removeprefix("worktree ") if line.startswith("worktree ") else here
        if line == f"branch refs/heads/{name}":
            held.append(here)
    if held:
        raise BadInput(
            f"branch {name} is checked out in {held[0]}: moving it would change the files there; "
            "switch that checkout to another branch first"
        )
    ours = gitflow.git(
        repo, "log", "-1", f"--format=%(trailers:key={CAMPAIGN_TRAILER},valueonly)", f"refs/heads/{name}"
    )
    if not ours.strip():
        raise BadInput(
            f"branch {name} exists and its last commit is not a result commit: `--force` moves only a "
            f"result branch; pick another name, or delete it first (`git branch -D {name}`)"
        )
