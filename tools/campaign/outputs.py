"""What a campaign keeps of its runs' outputs (runoutputs.py moves them into each run's folder):

    retain(campaign)          `keep_outputs:` and `outputs_max_gb:` applied after every row: the
                              outputs of runs not kept are deleted, the oldest first under the cap,
                              never the best's or the baseline's
    best_outputs(campaign)    the best's outputs folder and its largest files, for the closing lines
    usage(campaign)           the disk the kept outputs use, for status

Only a folder named in a ledger row's `outputs` column, inside the campaign's own folder, is ever
deleted: nothing of the user's can be.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from autoresearch_skills import runoutputs
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.ledger import Row


@dataclass(frozen=True)
class Kept:
    """One run's outputs folder as the ledger names it."""

    row: Row
    folder: Path

    @property
    def size(self) -> int:
        return runoutputs.folder_size(self.folder)


def folder_of(campaign: Campaign, row: Row) -> Path | None:
    """The outputs folder a row names, when it is inside the campaign folder and still there."""
    if not row.outputs:
        return None
    folder = Path(row.outputs)
    folder = folder if folder.is_absolute() else campaign.repo / folder
    inside = folder.resolve().is_relative_to(campaign.folder.resolve())
    return folder if inside and folder.is_dir() else None


def kept_folders(campaign: Campaign, rows: list[Row] | None = None) -> list[Kept]:
    rows = campaign.rows() if rows is None else rows
    found = [(r, folder_of(campaign, r)) for r in rows]
    return [Kept(r, f) for r, f in found if f is not None]


def retain(campaign: Campaign) -> list[Path]:
    """Delete the outputs `keep_outputs:` does not keep, then the oldest under `outputs_max_gb:`.
    Returns the folders deleted."""
    s = campaign.settings
    rows = campaign.rows()
    kept = kept_folders(campaign, rows)
    protected = _protected(campaign, rows)
    keep_by_rule = {
        "all": lambda row: True,
        "none": lambda row: False,
        "best": lambda row: row.index in _best_indexes(campaign, rows),
        "kept": lambda row: row.index in protected or row.index in _kept_indexes(rows),
    }[s.keep_outputs]
    deleted = [k for k in kept if not keep_by_rule(k.row)]
    left = [k for k in kept if keep_by_rule(k.row)]
    if s.outputs_max_gb is not None:
        cap = s.outputs_max_gb * 1e9
        total = sum(k.size for k in left)
        finished = set(_kept_indexes(rows))
        # discarded and crashed runs first, then kept ones, oldest first; never the best's or baseline's
        order = sorted(
            (k for k in left if k.row.index not in protected),
            key=lambda k: (k.row.index in finished, k.row.index),
        )
        for k in order:
            if total <= cap:
                break
            total -= k.size
            deleted.append(k)
    for k in deleted:
        shutil.rmtree(k.folder, ignore_errors=True)
    return [k.folder for k in deleted]


def best_outputs(campaign: Campaign, rows: list[Row] | None = None) -> Kept | None:
    """The outputs of the best's latest run that kept any."""
    rows = campaign.rows() if rows is None else rows
    indexes = _best_indexes(campaign, rows)
    of_best = [k for k in kept_folders(campaign, rows) if k.row.index in indexes]
    return of_best[-1] if of_best else None


def weights_line(campaign: Campaign, kept: Kept) -> str:
    """`weights: reports/.../runs/010-x/outputs/out/ckpt.pt (1.2 MB)`: the largest file of the best's
    outputs, and how many more there are."""
    files = runoutputs.largest(kept.folder, n=10_000)
    if not files:
        return f"outputs: {_shown(campaign, kept.folder)} (empty)"
    path, size = files[0]
    more = f"; {len(files) - 1} more file(s) in {_shown(campaign, kept.folder)}" if len(files) > 1 else ""
    return f"weights: {_shown(campaign, path)} ({runoutputs.human_size(size)}){more}"


def usage(campaign: Campaign) -> str:
    """`outputs: 1.4 GB kept for 5 runs (keep_outputs: kept)`."""
    kept = kept_folders(campaign)
    total = sum(k.size for k in kept)
    return (
        f"outputs: {runoutputs.human_size(total)} kept for {len(kept)} run(s) "
        f"(keep_outputs: {campaign.settings.keep_outputs})"
    )


def _shown(campaign: Campaign, path: Path) -> str:
    try:
        return str(path.relative_to(campaign.repo))
    except ValueError:
        return str(path)


def _best_indexes(campaign: Campaign, rows: list[Row]) -> set[int]:
    found = noise.best(rows, campaign.settings.direction)
    return set(found.indexes) if found else set()


def _kept_indexes(rows: list[Row]) -> list[int]:
    """Rows of a kept commit, or of a candidate awaiting the rerun that may confirm it, and the
    confirmation runs at a larger scale (`confirm:`): their weights are the ones trained at scale."""
    kept = [i for g in noise.groups(rows).values() if g.kept or g.candidate for i in g.indexes]
    return kept + [r.index for r in rows if r.is_confirmation]


def _protected(campaign: Campaign, rows: list[Row]) -> set[int]:
    """The best's runs and the baseline's: never deleted by the cap."""
    baseline = {r.index for r in rows if r.is_baseline}
    return _best_indexes(campaign, rows) | baseline
