"""Any campaign as an Optuna study, to open in optuna-dashboard, whatever policy (or agent) ran it.

    export(rows, storage, name, direction)   one trial per attempt: its knob values as params (each
                                             knob a categorical of the values tried), the mean of
                                             its commit's finished runs as its value, FAIL for a
                                             crash or timeout, PRUNED for a cancelled run; the
                                             attempt's index, branch, commit and status as user
                                             attributes. Reruns are runs of their attempt.

An attempt without knob values (a free edit, a diff) is a trial without params. The study is
written anew (an earlier export of the same name is replaced); the campaign's own optuna.db, which
the optuna policy owns, is never touched.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.pareto import Objective
from autoresearch_skills.errors import BadInput
from autoresearch_skills.ledger import Row
from autoresearch_skills.outcome import Status

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

INSTALL = "pip install 'autoresearch-skills[optuna]'"


def export(
    rows: Sequence[Row], storage: str, name: str, direction: str, objectives: Sequence[Objective] = ()
) -> int:
    """Write the study; returns how many trials it holds. With `objectives` (beyond the metric) the
    study has one direction each and a trial holds each one's mean over its commit's runs (a trial
    whose runs never printed one is FAIL)."""
    try:
        import optuna
    except ImportError:
        raise BadInput(f"exporting to Optuna needs Optuna, which is not installed: {INSTALL}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    attempts = [r for r in rows if not r.rerun_of]
    values_of: dict[str, list[Any]] = {}
    for row in attempts:
        for knob, value in row.knob_values().items():
            if value not in values_of.setdefault(knob, []):
                values_of[knob].append(value)
    choices = {k: tuple(_plain(v) for v in vs) for k, vs in values_of.items()}
    pooled = {i: g for g in noise.groups(rows).values() for i in g.indexes}
    if name in optuna.get_all_study_names(storage):
        optuna.delete_study(study_name=name, storage=storage)
    directions = [
        optuna.study.StudyDirection.MINIMIZE if d == "min" else optuna.study.StudyDirection.MAXIMIZE
        for d in (direction, *(o.direction for o in objectives))
    ]
    study = optuna.create_study(study_name=name, storage=storage, directions=directions)
    by_index = {r.index: r for r in rows}
    states = optuna.trial.TrialState
    for row in attempts:
        params = {k: _plain(v) for k, v in row.knob_values().items()}
        distributions: dict[str, BaseDistribution] = {
            k: optuna.distributions.CategoricalDistribution(choices[k]) for k in params
        }
        group = pooled.get(row.index)
        values: list[float] | None = None
        if group is not None:
            values = [group.mean]
            for objective in objectives:
                printed = [by_index[i].objective_values().get(objective.metric) for i in group.indexes]
                found = [v for v in printed if v is not None]
                values = values + [noise.mean_of(found)] if found and values is not None else None
        if values is not None:
            state = states.COMPLETE
        elif group is not None:
            state = states.FAIL  # an objective never printed
        else:
            state = states.PRUNED if row.status is Status.CANCELLED else states.FAIL
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=distributions,
                values=values,
                state=state,
                user_attrs={
                    "index": row.index,
                    "branch": row.branch,
                    "commit": row.commit,
                    "status": str(Status.KEEP if group and group.kept else row.status),
                    "runs": group.n if group else 1,
                },  # fmt: skip
            )
        )
    return len(attempts)


def default_storage(folder: Path) -> str:
    """`sqlite:///<campaign folder>/study.db`: beside, never in, the optuna policy's own optuna.db."""
    return f"sqlite:///{folder / 'study.db'}"


def _plain(value: Any) -> Any:
    """A value Optuna can hold as a categorical choice: None, bool, int, float or str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value)
