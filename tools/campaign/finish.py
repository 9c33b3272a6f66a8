"""The end of a campaign, the same whoever drove it (the loop, or an agent's `ars exp run`):

- the user's checkout goes back to the branch the campaign started from, as they left it:
  only when experiments ran in place, nothing is in flight and no tracked file is modified
  (untracked files never stop it: logs, wandb/, the file `ars ... > out.txt` writes to stay
  where they are, as git leaves them; nor does our own output file when git tracks it);
- the campaign's worktrees that no experiment holds are removed (every result stays on its branch);
- the tmux sessions of its finished runs are closed (`close_sessions`; logs stay), unless
  `keep_sessions_at_end`;
- the session memory's current subtask is closed with the verdict;
- the lines say where the best result lives (`git checkout <branch>` to use it, and the command it
  ran when its knobs are on the command line), where its weights are (`weights:` the largest file
  of its outputs folder), with `holdout:` both numbers for the baseline and the best, and with
  `objectives:` the Pareto front (`pareto:`), and with `confirm:` each confirmed result's gain on
  the proxy beside its gain at the larger scale (`confirmed at scale:`, campaign/confirmation.py).
Each step is safe to repeat: `ars campaign finish` may be called again at any time.
"""

from __future__ import annotations

import subprocess

from autoresearch_skills import gitflow, knobs
from autoresearch_skills.campaign import allocation, confirmation, holdout, keeprule, noise, outputs, pareto
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.campaign.workdirs import remove_worktrees
from autoresearch_skills.launch.base import FINISHED, Run, state_path_for
from autoresearch_skills.ledger import Row
from autoresearch_skills.session_record import close_subtask


def wrap_up(campaign: Campaign) -> list[str]:
    """Close a campaign whose stop condition is met and which has nothing in flight.
    Returns what was done, one line each, for the caller to print."""
    lines = []
    home = go_home(campaign)
    if home:
        lines.append(home)
    removed = remove_worktrees(campaign)
    if removed:
        lines.append(f"worktrees: removed {len(removed)}; every result stays on its branch")
    released = allocation.release(campaign)  # the campaign's Slurm allocation: no idle GPUs held
    if released:
        lines.append(released)
    try:
        closed = 0 if campaign.settings.keep_sessions_at_end else close_sessions(campaign)
    except (OSError, subprocess.SubprocessError) as err:  # housekeeping never fails the end
        lines.append(f"warning: could not close the tmux sessions of finished runs: {err}")
    else:
        if closed:
            lines.append(f"tmux: closed {closed} session(s) of finished runs; their logs stay")
    rows = campaign.rows()
    best = noise.best(rows, campaign.settings.direction)
    if best is not None:
        alone = support_text(campaign, rows, best)
        lines.append(f"best: {best.describe(campaign.settings.metric)}{alone} ({how_to_use(campaign, best)})")
        lines += the_result(campaign, rows, best)
    lines += confirmation.lines(rows, campaign.settings.metric, campaign.settings.direction)
    close_subtask(campaign.repo, campaign.verdict().line)
    return lines


def support_text(campaign: Campaign, rows: list[Row], best: noise.Best) -> str:
    """What the best's line adds outside screening (whose claim `describe` already says): that its
    repeats agree exactly, or that one run and no rerun stand behind it; "" otherwise."""
    estimate = noise.estimate(rows, fingerprint=best.fingerprint, seeded=campaign.settings.seed is not None)
    if best.claim:
        return ""  # screening: the claim is in the line, the verdict below
    if estimate.deterministic:
        return f" ({'one run: ' if best.n == 1 else ''}{estimate.deterministic_text})"
    return " (one run: no rerun confirmed it)" if best.n == 1 else ""


def the_result(campaign: Campaign, rows: list[Row], best: noise.Best) -> list[str]:
    """What the best left: its weights (the largest file of its outputs folder), with a held-out
    check both numbers for the baseline and the best, and with `objectives:` the Pareto front."""
    lines = []
    claim = keeprule.verdict_line(campaign.settings, rows)
    if claim:
        lines.append(f"verdict: {claim}")
    kept = outputs.best_outputs(campaign, rows)
    if kept is not None:
        lines.append(outputs.weights_line(campaign, kept))
    try:
        compared = holdout.comparison(campaign, rows, best)
    except (OSError, gitflow.GitError) as err:  # a held-out command that cannot start never fails the end
        compared = f"held-out: the held-out command could not run: {err}"
    if compared:
        lines.append(compared)
    front = pareto.front(rows, campaign.settings.objective_list())
    if front:
        lines.append(f"pareto: {pareto.pareto_line([p.to_dict() for p in front])}")
    return lines


def close_sessions(campaign: Campaign, keep: int = 0) -> int:
    """Close the tmux sessions of the campaign's finished runs but the latest `keep` rows': while
    it runs, beyond `keep_sessions` (an overnight campaign must not leave a hundred dead sessions in
    `tmux ls`); at its end, all of them unless `keep_sessions_at_end`. Returns how many were closed.
    Only sessions of this campaign's rows, and `TmuxLauncher.close` closes one only when its run has
    ended and the session still carries that run's channel: a running session, or one someone else
    started under the same name, stays. Logs and run files stay."""
    # imported here: the agent hooks load this module through experiment and must answer fast
    from autoresearch_skills.launch.tmux import TmuxLauncher

    launcher, closed = TmuxLauncher(campaign.settings.tmux_socket), 0
    rows = [row for row in campaign.rows() if row.launcher == "tmux" and row.log_path]
    for row in rows[: max(0, len(rows) - keep)]:
        try:
            run = Run.load(state_path_for(row.log_path))
        except (OSError, ValueError, TypeError):
            continue  # no run file (never launched) or not ours to judge
        if run.extra.get("session_closed"):
            continue
        if launcher.close(run):
            closed += 1
        elif run.reload().state not in FINISHED:
            continue  # still running: left alone, and looked at again next time
        run = run.reload()
        run.extra["session_closed"] = True
        run.save()
    return closed


def go_home(campaign: Campaign) -> str | None:
    """Switch the user's checkout back to the campaign's starting branch when that is safe."""
    state = campaign.state.read()
    home, repo = state.home_branch, campaign.repo
    if not home or state.experiments:
        return None
    try:
        here = gitflow.current_branch(repo)
        if here == home or not here.startswith(campaign.settings.prefix + "/"):
            return None
        tree = gitflow.tree_state(repo)
        targets = gitflow.output_targets()
        modified = [
            path
            for path in dict.fromkeys([*tree.staged, *tree.modified])
            if not gitflow.is_output_target(repo / path, targets)
        ]  # the log we write to, if tracked, is carried over by `git switch` when both branches agree
        if modified:
            return f"stayed on {here}: tracked files are modified there ({', '.join(modified[:3])})"
        gitflow.switch(repo, home)
    except gitflow.GitError as err:
        return f"stayed on the experiment branch: {err}"
    return f"back on {home}; each experiment stays on its branch under {here.rsplit('/', 1)[0]}/"


def finished(campaign: Campaign) -> bool:
    """Whether the campaign is over: its stop condition is met and nothing is in flight."""
    state = campaign.state.read()
    return not state.experiments and not campaign.verdict(state=state).should_continue


def how_to_use(campaign: Campaign, best: noise.Best) -> str:
    """`git checkout REF` to use it; and the command it ran when that command carries knobs of its
    own (`--args`, `policy.args`), which live in the command, not in the files of the branch."""
    checkout = f"`git checkout {checkout_ref(campaign, best)}`"
    ran = command_of_best(campaign, best)
    if ran:
        return f"{checkout}, then run `{ran}`: its command-line knobs are in the command, not in the files"
    return f"{checkout} to use it"


def command_of_best(campaign: Campaign, best: noise.Best) -> str | None:
    """The command the best ran when it carries knobs of its own (`--args`, `policy.args`), which
    no file of its commit holds; None when it ran the campaign's command as written."""
    # the commit's first run: a repeat's command carries the seed it was given (`seed:`), no setting
    first = next((r for r in campaign.rows() if r.index == best.key), best.row)
    ran = str(getattr(first, "command", "") or "")
    return ran if ran and ran != knobs.with_args(campaign.settings.command, {}) else None


def checkout_ref(campaign: Campaign, best: noise.Best) -> str:
    """What `git checkout` takes to use the best: its branch when the best commit is that
    branch's head, else the commit itself (a ratchet moved past it, or the branch was deleted)."""
    if (
        gitflow.branch_exists(campaign.repo, best.branch)
        and gitflow.head_commit(campaign.repo, best.branch) == best.commit
    ):
        return best.branch
    return best.commit[:12] if best.commit else best.branch
