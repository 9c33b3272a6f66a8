"""Where an experiment is checked out: in a worktree of the campaign's, or in the user's checkout.

Every experiment gets a git worktree under the campaign folder (`worktrees/wt-<n>`), reused by the
next experiment once its row is written, so nothing a run writes (a checkpoint where the user keeps
their own) lands in the user's checkout, and what it writes is moved into its run folder
(runoutputs.py). Only `worktrees: off` runs in the user's checkout, one experiment at a time, and
refuses a tree with uncommitted changes before anything is created. Which worktree is held is read
from the in-flight records, never kept apart, so a crash cannot leak one.

A worktree holds tracked files only: the ignored files a run needs (prepared data, `.env`,
tokenizers) reach it from `.worktreeinclude` and `worktree_include:` (worktreeinclude.py: cloned,
copied, or linked to one read-only snapshot; never committed, never written back).
"""

from __future__ import annotations

from pathlib import Path

from autoresearch_skills import gitflow, worktreeinclude
from autoresearch_skills.campaign.record import Experiment
from autoresearch_skills.campaign.state import CampaignState
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.errors import BadInput


def check_isolation(campaign: Campaign) -> None:
    """Refuse, before anything is created, what `worktrees: off` cannot isolate."""
    if campaign.settings.worktrees != "off":
        return
    tree = gitflow.tree_state(campaign.repo)
    if tree.dirty_tracked:
        raise BadInput(
            f"{campaign.repo} has uncommitted changes ({tree.summary()}); commit them yourself, "
            "or allow worktrees (`worktrees: auto` in campaign.yaml) so experiments run beside them"
        )
    if campaign.settings.pool().parallel > 1:
        raise BadInput("parallel experiments need worktrees: set `worktrees: auto` (or parallel: 1)")


def worktrees_dir(campaign: Campaign) -> Path:
    return campaign.folder / "worktrees"


def check_out(campaign: Campaign, state: CampaignState, experiment: Experiment) -> Path:
    """Check the experiment out where it may edit and run it: in place, or in a worktree of the
    campaign's own. A new worktree is held (saved in state.json) before git creates it: `state` is
    the open transaction's."""
    checkout = experiment.checkout or experiment.branch
    busy = any(
        e.branch == checkout and e.workdir for k, e in state.experiments.items() if k != experiment.key
    )
    if busy:  # a branch is checked out in one place only: a rerun beside its twin gets the commit
        checkout = experiment.branch_start
    if _in_place_allowed(campaign, state, experiment.key):
        switch(campaign.repo, checkout)
        return campaign.repo
    # An opening interrupted after its worktree was made keeps that worktree.
    worktree = Path(experiment.workdir) if experiment.workdir else None
    if worktree is None or worktree == campaign.repo or not (worktree / ".git").exists():
        worktree = _free_worktree(campaign, state, experiment.key, checkout)
    if worktree is None:
        used = {p.name for p in worktrees_dir(campaign).glob("wt-*")}
        n = 1
        while f"wt-{n}" in used:
            n += 1
        worktree = worktrees_dir(campaign) / f"wt-{n}"
        experiment.workdir = str(worktree)  # held from now on, even if this process dies
        campaign.state.save(state)
        worktree.parent.mkdir(parents=True, exist_ok=True)
        detach = [] if gitflow.branch_exists(campaign.repo, checkout) else ["--detach"]
        gitflow.git(campaign.repo, "worktree", "add", "--quiet", *detach, str(worktree), checkout)
        carry_included(campaign, worktree)
        return worktree
    if gitflow.tree_state(worktree).dirty_tracked:
        raise BadInput(
            f"the campaign worktree {worktree} has uncommitted changes; commit or discard them first"
        )
    switch(worktree, checkout)
    carry_included(campaign, worktree)
    return worktree


def carry_included(campaign: Campaign, worktree: Path) -> list[worktreeinclude.Carried]:
    """Bring the ignored files listed in `.worktreeinclude` (and `worktree_include:`) into the
    worktree; again on reuse, so data prepared since then arrives too (unchanged files are skipped)."""
    s = campaign.settings
    paths = worktreeinclude.included(campaign.repo, s.worktree_include)
    if not paths:
        return []
    return worktreeinclude.carry(campaign.repo, worktree, paths, campaign.folder, s.carry_copy_mb)


def _in_place_allowed(campaign: Campaign, state: CampaignState, key: str) -> bool:
    """Only `worktrees: off` runs in the user's checkout: a run there writes where the code writes
    (a checkpoint of the user's), so every other campaign runs in worktrees of its own."""
    if campaign.settings.worktrees != "off":
        return False
    return not state.holding(campaign.repo, but=key)


def _free_worktree(campaign: Campaign, state: CampaignState, key: str, checkout: str) -> Path | None:
    """A worktree no experiment holds: the one that has `checkout` checked out already when there is
    one (git checks a branch out in one place only: a rerun of a branch another free worktree holds
    must go there), else the first."""
    root = worktrees_dir(campaign)
    free = [
        path
        for path in sorted(root.glob("wt-*"), key=lambda p: int(p.name[3:]) if p.name[3:].isdigit() else 0)
        if (path / ".git").exists() and not state.holding(path, but=key)
    ]
    holding = [path for path in free if checked_out_at(str(path), checkout)]
    chosen = holding or free
    return chosen[0] if chosen else None


def switch(workdir: Path, checkout: str) -> None:
    """A branch, or a commit (detached: a rerun of a commit its branch has moved past)."""
    if gitflow.branch_exists(workdir, checkout):
        gitflow.switch(workdir, checkout)
    else:
        gitflow.git(workdir, "switch", "--quiet", "--detach", checkout)


def checked_out_at(workdir: str, branch: str) -> bool:
    try:
        return Path(workdir).exists() and gitflow.current_branch(workdir) == branch
    except BadInput:
        return False


def remove_worktrees(campaign: Campaign) -> list[Path]:
    """Remove the campaign's worktrees that no experiment holds (every result stays on its
    branch); a worktree with uncommitted tracked changes is left for a person to look at."""
    state = campaign.state.read()
    removed = []
    for path in sorted(worktrees_dir(campaign).glob("wt-*")):
        if state.holding(path) or not (path / ".git").exists():
            continue
        if gitflow.tree_state(path).dirty_tracked:
            continue
        gitflow.git(campaign.repo, "worktree", "remove", "--force", str(path), check=False)
        if not path.exists():
            removed.append(path)
    gitflow.git(campaign.repo, "worktree", "prune", check=False)
    return removed
