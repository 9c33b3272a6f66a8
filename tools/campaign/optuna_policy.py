"""The optuna policy: Optuna's samplers propose the loop's knob values and learn from its results,
through ask-and-tell, with the study kept in the campaign folder.

Contract (the `policy:` block of a campaign file):
    kind: optuna, sampler: tpe | cmaes | gp | qmc | random | nsga2 (default tpe), seed, samples
    space:  knobs of the mutable files, as grid and random name them; args: command-line arguments
    each knob's values: a list (categorical), {low, high} (a float range), {low, high, log: true}
    (log-scaled), {low, high, step}; integer bounds make an integer range (write 0.0 for a float).
    random's {uniform: [a, b]}, {log_uniform: [a, b]} and {int: [a, b]} read as the same ranges.
    samples: the most trials proposed; unset: until the stop rule.

The study is `sqlite:///<campaign folder>/optuna.db`, named after the campaign, loaded when it
exists. Each `next(context)` first tells the study every result the ledger holds that it was not
told, then asks one trial:
    a finished run     its value: the mean of its commit's finished runs (reruns of one commit are one
                       trial), told once no run of that branch is in flight; with `objectives:`
                       the list of values, the metric's mean first, then each objective's
    a crash, timeout   FAIL
    cancelled, pruned  PRUNED
A trial and its rows are matched by knob values only: the row's `knobs` column holds the trial's
params (each trial also keeps the values it proposed as the user attributes `set` and `args`),
never by a slug or a description. With `parallel: K` the trials in flight stay RUNNING in the study
while others are asked; TPE is built with `constant_liar=True` so that they do not all land on one
point (the other samplers have no such option: they may propose nearby points).

Values are never proposed twice. A trial whose values a ledger row, a run in flight or another
waiting trial already holds is told that earlier outcome (a run still in flight: FAIL, which no
sampler learns from) with the user attribute `duplicate_of`, and another is asked; so is a trial of
values the parent commit already holds (told the parent's mean, `same_as_parent`). In a finite
space (lists and integer ranges) a duplicate is followed by an untried point (enqueued, in grid
order), and the policy is exhausted once every point has a trial; in a continuous one, after
MAX_ASKS duplicates in a row.

Several objectives (`objectives:` in campaign.yaml, read from the campaign folder): the study is
created with `directions=[the metric's, *each objective's]`; its sampler, unset, is NSGA-II, and
`sampler: tpe` is Optuna's multi-objective TPE (cmaes is refused: it optimises one value). A run
that did not print an objective leaves its trial without that value: the trial is told FAIL. A study
is never reshaped: one created with other directions (objectives added or removed after the first
ask) is refused in one line naming optuna.db.

After a kill: a trial asked by an earlier process and never opened as an experiment (killed between
the ask and the branch) is proposed again as it is, so no trial is lost; one killed inside the ask,
before all its values were drawn, is told FAIL, never run; one this process proposed
that the loop did not open (rejected after its retries) is told FAIL. Only RUNNING trials are ever
told, and telling is one storage write, so nothing is told twice. The runs that end after the last
ask are told as the loop ends (`observe`, which the loop calls then, also in a resume that asks
nothing more) and, as a last resort, when the process exits.

Optuna is an optional extra (`pip install 'autoresearch-skills[optuna]'`), imported only here and
only when the policy is built, so `ars --help` and the hooks never load it.
"""

from __future__ import annotations

import atexit
import importlib.util
import itertools
import json
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoresearch_skills import knobs, ledger, notices
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.hypothesis import Policy, Proposal, Rejected, apply_set, knob_files
from autoresearch_skills.campaign.pareto import Objective, objective_problem
from autoresearch_skills.campaign.policy_settings import OPTUNA_SAMPLERS, PolicySettings
from autoresearch_skills.errors import BadInput
from autoresearch_skills.gitflow import slugify
from autoresearch_skills.outcome import Status
from autoresearch_skills.yamlfile import read_yaml

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

KIND = "optuna"
NEEDS = {"cmaes": ("cmaes",), "gp": ("torch", "scipy"), "qmc": ("scipy",)}  # beyond optuna itself
INSTALL = "pip install 'autoresearch-skills[optuna]'"
STUDY_FILE = "optuna.db"
MAX_ASKS = 20  # duplicates in a row before a continuous space counts as exhausted
MAX_POINTS = 10_000  # a finite space up to this size is walked for its untried points
RANGE_KEYS = {"low", "high", "log", "step"}
FAIL, PRUNED = "fail", "pruned"  # told without a value (as TrialState: Optuna loads lazily)


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise BadInput(f"policy kind optuna needs Optuna, which is not installed: {INSTALL}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the loop prints its own lines
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def distributions(settings: PolicySettings) -> dict[str, BaseDistribution]:
    """Each knob of `space:` and `args:` as an Optuna distribution; BadInput names a bad spec."""
    _optuna()
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    both = dict(settings.space)
    twice = sorted(set(settings.space) & set(settings.args))
    if twice:
        raise BadInput(f"policy.space and policy.args both name {', '.join(twice)}: give each knob once")
    both.update(settings.args)
    if not both:
        raise BadInput(
            "policy optuna needs `space:` (knobs of the mutable files) or `args:` (command-line arguments)"
        )
    found: dict[str, BaseDistribution] = {}
    for name, spec in both.items():
        where = f"policy.{'args' if name in settings.args else 'space'} {name}"
        if isinstance(spec, list):
            if not spec or not all(v is None or isinstance(v, (bool, int, float, str)) for v in spec):
                raise BadInput(f"{where}: a list of values needs at least one number, text or boolean")
            found[name] = CategoricalDistribution(spec)
            continue
        low, high, log, step = _range(spec, where)
        if log and step is not None:
            raise BadInput(f"{where}: give `log: true` or `step`, not both")
        if log and low <= 0:
            raise BadInput(f"{where}: a log-scaled range needs low > 0 (got {low})")
        if step is not None and step <= 0:
            raise BadInput(f"{where}: step must be above 0 (got {step})")
        if all(_is_int(v) for v in (low, high)) and (step is None or _is_int(step)):
            found[name] = IntDistribution(int(low), int(high), log=log, step=int(step or 1))
        else:
            found[name] = FloatDistribution(float(low), float(high), log=log, step=step)
    return found


def _range(spec: object, where: str) -> tuple[float, float, bool, float | None]:
    """low, high, log, step of a range spec; BadInput with the forms it may take."""
    forms = (
        "use a list of values, {low: A, high: B}, {low: A, high: B, log: true} or {low: A, high: B, step: S}"
    )
    if isinstance(spec, dict) and len(spec) == 1 and set(spec) <= {"uniform", "log_uniform", "int"}:
        (form, bounds), = spec.items()  # fmt: skip
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_number(b) for b in bounds)):
            raise BadInput(f"{where}: {{{form}: [a, b]}} needs two numbers (got {bounds!r})")
        low, high = bounds
        if form == "int" and not all(_is_int(b) for b in bounds):
            raise BadInput(f"{where}: {{int: [a, b]}} needs two integers (got {bounds!r})")
        if form != "int":
            low, high = float(low), float(high)
        spec = {"low": low, "high": high, "log": form == "log_uniform"}
    if not isinstance(spec, dict) or not {"low", "high"} <= set(spec) or set(spec) - RANGE_KEYS:
        raise BadInput(f"{where}: {forms} (got {spec!r})")
    low, high, log, step = spec["low"], spec["high"], spec.get("log", False), spec.get("step")
    if not (_is_number(low) and _is_number(high)) or low >= high:
        raise BadInput(f"{where}: low and high must be numbers with low < high (got {low!r}, {high!r})")
    if not isinstance(log, bool) or not (step is None or _is_number(step)):
        raise BadInput(f"{where}: `log` is true or false and `step` a number (got {log!r}, {step!r})")
    return low, high, log, step


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def sampler_problem(name: str) -> str | None:
    """Why sampler `name` cannot be built here (a library it needs is missing); None when it can."""
    missing = [module for module in NEEDS.get(name, ()) if importlib.util.find_spec(module) is None]
    if missing:
        return f"policy.sampler {name} needs {' and '.join(missing)}: pip install {' '.join(missing)}"
    return None


def make(settings: PolicySettings, attempted_slugs: set[str]) -> OptunaPolicy:
    """The policy for `settings`; BadInput when Optuna, a sampler's library or a range is wrong."""
    return OptunaPolicy(settings, attempted_slugs)


class OptunaPolicy(Policy):
    def __init__(self, settings: PolicySettings, attempted_slugs: set[str]):
        super().__init__(settings, attempted_slugs)
        self.optuna = _optuna()
        if settings.sampler is not None and settings.sampler not in OPTUNA_SAMPLERS:
            choices = ", ".join(OPTUNA_SAMPLERS)
            raise BadInput(f"policy.sampler must be one of {choices} (got {settings.sampler!r})")
        problem = sampler_problem(settings.sampler or "tpe")
        if problem:
            raise BadInput(problem)
        self.space = distributions(settings)
        self.study: optuna.Study | None = None
        self.folder: Path | None = None
        self.issued: set[int] = set()  # trials this process proposed
        self.last: int | None = None  # the trial of the proposal just returned
        self.objectives: list[Objective] = []  # `objectives:`, the metrics besides the campaign's

    # ------------------------------------------------------------ the study

    def study_for(self, context: dict) -> optuna.Study:
        """The campaign's study, created on the first ask and loaded by every later process."""
        if self.study is not None:
            return self.study
        optuna = self.optuna
        self.folder = Path(context["folder"])
        self.objectives = objectives_of(self.folder)
        storage = f"sqlite:///{self.folder / STUDY_FILE}"
        directions = [_optuna_direction(context["direction"])]
        directions += [_optuna_direction(o.direction) for o in self.objectives]
        name = context["campaign"]
        asked = 0
        if name in optuna.get_all_study_names(storage):
            existing = optuna.load_study(study_name=name, storage=storage)
            had = [d.name.lower() for d in existing.directions]
            if had != directions:
                raise BadInput(
                    f"{self.folder / STUDY_FILE} holds study {name} with directions {', '.join(had)}, but "
                    f"campaign.yaml now asks for {', '.join(directions)} (`objectives:` changed): a study is "
                    "never reshaped; put `objectives:` back, or move optuna.db aside to start a new study"
                )
            asked = len(existing.trials)
        if len(directions) > 1 and self.settings.sampler == "cmaes":
            raise BadInput("policy.sampler cmaes optimises one value: with `objectives:` use nsga2 or tpe")
        self.study = optuna.create_study(
            storage=storage,
            study_name=name,
            directions=directions,
            sampler=self._sampler(asked, several=len(directions) > 1),
            load_if_exists=True,
        )
        atexit.register(self.tell_at_exit)
        return self.study

    def _sampler(self, asked: int, several: bool = False) -> optuna.samplers.BaseSampler:
        """The sampler, seeded with `seed` plus the trials asked before: a resumed process draws
        new points instead of repeating the first process's draws. QMC finds its place in the
        sequence from the study itself, so it keeps its seed. Unset: TPE, or NSGA-II for `several`
        objectives (TPE then is Optuna's multi-objective TPE, still with its constant liar)."""
        samplers = self.optuna.samplers
        kind, seed = self.settings.sampler or ("nsga2" if several else "tpe"), self.settings.seed
        if kind == "qmc":
            return samplers.QMCSampler(seed=seed)
        seed += asked
        if kind == "tpe":
            return samplers.TPESampler(seed=seed, constant_liar=True)
        built: optuna.samplers.BaseSampler = {
            "cmaes": samplers.CmaEsSampler,
            "gp": samplers.GPSampler,
            "random": samplers.RandomSampler,
            "nsga2": samplers.NSGAIISampler,
        }[kind](seed=seed)
        return built

    # ------------------------------------------------------------ ask and tell

    def next(self, context: dict, feedback: str | None = None) -> Proposal | None:
        study = self.study_for(context)
        if feedback is not None and self.last is not None:
            self._tell(study, self.last, FAIL)  # the loop rejected it: a new trial is asked
        self.last = None
        rows = context["ledger"]
        in_flight = context["in_flight"]
        waiting = self.tell_finished(study, rows, in_flight, given_up=self.issued)
        for orphan in waiting:
            if orphan.number in self.issued:
                continue
            if set(orphan.params) != set(self.space):  # killed inside the ask: not a point at all
                self._tell(study, orphan.number, FAIL)
                continue
            # asked by a process killed before it opened it: proposed again as it is
            self.optuna.trial.Trial(study, orphan._trial_id).set_user_attr("proposed", True)
            return self._proposed(orphan.number, orphan.params)
        if self.settings.samples is not None and self._proposed_count(study) >= self.settings.samples:
            return None
        for _ in range(MAX_ASKS):
            untried = self.untried(study)
            if untried == []:
                return None  # every point of a finite space has a trial
            trial = study.ask(self.space)
            values = dict(trial.params)
            trial.set_user_attr("set", {k: v for k, v in values.items() if k not in self.settings.args})
            trial.set_user_attr("args", {k: v for k, v in values.items() if k in self.settings.args})
            earlier = self._earlier(study, trial.number, values, rows, in_flight, context)
            if earlier is None:
                trial.set_user_attr("proposed", True)  # what `samples` counts
                return self._proposed(trial.number, values)
            attr, outcome = earlier
            trial.set_user_attr(attr[0], attr[1])
            self._tell(study, trial.number, outcome)
            rest = self.untried(study) if untried else None
            if rest:  # a sampler circling a finite space's tried points: the next ask takes a new one
                study.enqueue_trial(rest[0], skip_if_exists=True)
        return None

    def bounds(self) -> dict[str, list[Any]]:
        """Each `space:` knob's extreme values (a list's every choice): what validate writes into the
        files to check that the knob takes values of this kind."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        found: dict[str, list[Any]] = {}
        for name, dist in self.space.items():
            if isinstance(dist, CategoricalDistribution) and name not in self.settings.args:
                found[name] = list(dist.choices)
            elif isinstance(dist, (FloatDistribution, IntDistribution)) and name not in self.settings.args:
                found[name] = [dist.low, dist.high]
        return found

    def untried(self, study: optuna.Study) -> list[dict[str, Any]] | None:
        """The points of a finite space (lists and integer ranges, up to MAX_POINTS) no trial has
        had, in grid order; None when the space is continuous or larger."""
        from optuna.distributions import CategoricalDistribution, IntDistribution

        axes: list[list[Any]] = []
        for dist in self.space.values():
            if isinstance(dist, CategoricalDistribution):
                axes.append(list(dist.choices))
            elif isinstance(dist, IntDistribution) and not dist.log:
                axes.append(list(range(dist.low, dist.high + 1, dist.step)))
            else:
                return None
        if math.prod(len(axis) for axis in axes) > MAX_POINTS:
            return None
        seen = {_point(t.params) for t in study.get_trials(deepcopy=False) if t.params}
        points = (dict(zip(self.space, values)) for values in itertools.product(*axes))
        return [p for p in points if _point(p) not in seen]

    def _proposed(self, number: int, values: dict[str, Any]) -> Proposal:
        """The proposal of trial `number`, remembered as issued by this process."""
        self.issued.add(number)
        self.last = number
        file_values = {k: v for k, v in values.items() if k not in self.settings.args}
        arg_values = {k: v for k, v in values.items() if k in self.settings.args}
        short = "-".join(f"{k.rsplit(':', 1)[-1].rsplit('.', 1)[-1]}-{_short(v)}" for k, v in values.items())
        return Proposal(
            slugify(f"trial-{number}-{short}"),
            f"optuna trial {number}: {knobs.describe(values)}",
            set=file_values,
            args=arg_values,
        )

    def _proposed_count(self, study: optuna.Study) -> int:
        return sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get("proposed"))

    def tell_finished(
        self, study: optuna.Study, rows: list[dict], in_flight: list[dict], given_up: set[int]
    ) -> list[FrozenTrial]:
        """Tell every RUNNING trial whose rows are recorded and whose branch has nothing in flight;
        a trial of `given_up` (proposed, then neither a row nor an experiment) is told FAIL.
        Returns the trials still waiting for an experiment (asked, never opened)."""
        running = study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.RUNNING,))
        flying = [_proposal_values(e.get("proposal")) for e in in_flight]
        branches = {e.get("branch") for e in in_flight}
        waiting = []
        for trial in running:
            mine = [r for r in rows if _holds(_knobs_of(r), trial.params)]
            if mine:
                if not any(r["branch"] in branches for r in mine):
                    self._tell(study, trial.number, outcome_of(mine, rows, self.objectives))
            elif any(_holds(values, trial.params) for values in flying):
                continue
            elif trial.number in given_up:
                self._tell(study, trial.number, FAIL)  # the loop gave it up: rejected, never opened
            else:
                waiting.append(trial)
        return waiting

    def _earlier(
        self, study: optuna.Study, number: int, values: dict[str, Any], rows: list[dict],
        in_flight: list[dict], context: dict,
    ) -> tuple[tuple[str, Any], float | list[float] | str] | None:  # fmt: skip
        """The outcome these values already have (and the user attribute saying whose), or None
        when they are new."""
        mine = [r for r in rows if _holds(_knobs_of(r), values)]
        branches = {e.get("branch") for e in in_flight}
        if mine:
            first = mine[0]["index"]
            if any(r["branch"] in branches for r in mine):
                return ("duplicate_of", f"row {first}"), FAIL  # its reruns are in flight
            return ("duplicate_of", f"row {first}"), outcome_of(mine, rows, self.objectives)
        for e in in_flight:
            if _holds(_proposal_values(e.get("proposal")), values):
                return ("duplicate_of", e["key"]), FAIL  # told once it ends, by its own trial
        for trial in study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.RUNNING,)):
            if trial.number != number and _holds(trial.params, values):
                return ("duplicate_of", f"trial {trial.number}"), FAIL
        if not any(k in self.settings.args for k in values):
            parent = context["parent_commit"]
            if self._parent_holds(values, context):
                same = [r for r in rows if r["commit"] == parent]
                told = outcome_of(same, rows, self.objectives) if same else FAIL
                return ("same_as_parent", parent), told
        return None

    def _parent_holds(self, values: dict[str, Any], context: dict) -> bool:
        """Whether the parent commit's files already hold these knob values."""
        texts: dict[str, str] = context.get("mutable_files") or {}
        files = knob_files(list(texts), texts.get)
        try:
            changed = apply_set(files, values)
        except Rejected:
            return False  # the loop's check names the problem
        return all(files[path] == text for path, text in changed.items())

    def _tell(self, study: optuna.Study, number: int, outcome: float | list[float] | str) -> None:
        states = self.optuna.trial.TrialState
        if outcome == FAIL:
            study.tell(number, state=states.FAIL, skip_if_finished=True)
        elif outcome == PRUNED:
            study.tell(number, state=states.PRUNED, skip_if_finished=True)
        elif isinstance(outcome, list):
            study.tell(number, outcome, skip_if_finished=True)
        else:
            study.tell(number, float(outcome), skip_if_finished=True)

    def observe(self, context: dict) -> None:
        """Tell the study what ended since the last ask (the loop's end: a resume that asks nothing
        more still tells the last results)."""
        in_flight = context["in_flight"]
        self.tell_finished(self.study_for(context), context["ledger"], in_flight, given_up=set())

    def tell_at_exit(self) -> None:
        """The runs that ended after the last ask, told from the ledger as the process exits.
        Nothing in flight is known here, so only trials with recorded rows are told."""
        if self.study is None or self.folder is None or not (self.folder / "results.tsv").exists():
            return
        try:
            # as the loop's context holds them: a run at a larger scale (`confirm:`) tells no trial
            read = noise.deciding(ledger.read(self.folder / "results.tsv"))
            rows = [r.to_dict(holdout=False) for r in read]
            # nothing is given up here: a trial never opened waits for the next process's ask
            self.tell_finished(self.study, rows, [], given_up=set())
        except Exception as err:  # an exit hook must never turn a clean exit into a traceback
            notices.warn(f"warning: the optuna study was not brought up to date with the ledger: {err}")


def outcome_of(
    mine: list[dict], rows: list[dict], objectives: list[Objective] | None = None
) -> float | list[float] | str:
    """What a trial's rows tell: the mean of its commit's finished runs (its reruns included),
    else FAIL after a crash or timeout, else PRUNED (cancelled). With `objectives`: the list of the
    metric's mean and each objective's (over the runs that printed it); FAIL when one has none."""
    indices = {str(r["index"]) for r in mine}
    commits = {r["commit"] for r in mine if r["commit"]}
    runs = [
        r for r in rows if str(r["index"]) in indices or r["commit"] in commits or r["rerun_of"] in indices
    ]
    finished = [r for r in runs if Status(r["status"]).is_finished()]
    values = [float(r["metric_value"]) for r in finished]
    if values and objectives:
        means = [sum(values) / len(values)]
        for objective in objectives:
            told = [v for r in finished if (v := _objective_values(r).get(objective.metric)) is not None]
            if not told:
                return FAIL  # a run that did not print it: no point to place on the front
            means.append(sum(told) / len(told))
        return means
    if values:
        return sum(values) / len(values)
    if any(Status(r["status"]).is_failure() for r in runs):
        return FAIL
    return PRUNED


def objectives_of(folder: Path) -> list[Objective]:
    """The `objectives:` of the campaign in `folder` (its campaign.yaml, already validated), the
    metrics besides the campaign's own; [] for a single objective."""
    path = folder / "campaign.yaml"
    data = read_yaml(path) if path.exists() else {}
    entries = data.get("objectives") if isinstance(data, dict) else None
    if not entries:
        return []
    for number, entry in enumerate(entries, start=1):
        problem = objective_problem(entry, number)
        if problem:
            raise BadInput(f"{path}: {problem}")
    return [Objective.from_mapping(entry) for entry in entries]


def _optuna_direction(direction: str) -> str:
    return "minimize" if direction == "min" else "maximize"


def _objective_values(row: dict) -> dict[str, float]:
    """A ledger row's `objectives` column (as `Row.to_dict` holds it) as a mapping."""
    try:
        values = json.loads(row.get("objectives") or "{}")
    except ValueError:
        return {}
    if not isinstance(values, dict):
        return {}
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _knobs_of(row: dict) -> dict[str, Any]:
    try:
        values = json.loads(row.get("knobs") or "{}")
    except ValueError:
        return {}
    return values if isinstance(values, dict) else {}


def _proposal_values(proposal: dict | None) -> dict[str, Any]:
    proposal = proposal or {}
    return {**(proposal.get("set") or {}), **(proposal.get("args") or {})}


def _holds(values: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether `values` (a row's knobs, a proposal's) sets every param to the trial's value."""
    return bool(params) and all(name in values and values[name] == v for name, v in params.items())


def _point(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _short(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
