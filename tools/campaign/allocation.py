"""A campaign's own allocation, asked for at the first run, kept alive by whoever moves the campaign
on, let go at the end or a pause: on Slurm one allocation whose job steps are the runs
(`slurm_allocation: campaign`), on Ray `parallel` holder jobs that run the runs one after another
(`ray_allocation: campaign`).

    opening(campaign)             the loop's first line on it (a live one adopted on resume)
    ensure(campaign, remaining)   before a run starts: the live allocation, or a new one (its line)
    beat(campaign)                every tick: the campaign is alive (the holder's grace restarts)
    release(campaign)             the campaign ended or paused: a queued one is cancelled, a running
                                  one ends once its last step has
    line(campaign)                for status and doctor: the job, where, what it holds, time left,
                                  and the wall time split into queued, running and idle

The launcher side (the holders, the runs in them) is launch/slurm_allocation.py and
launch/slurm_steps.py, launch/ray_allocation.py and launch/ray_steps.py; this module only says what
the campaign asks for.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.clock import parse_duration
from autoresearch_skills.launch.slurm_allocation import Request

if TYPE_CHECKING:
    from autoresearch_skills.launch import ray_allocation

ASKED = "allocation_asked"  # run file `extra` key: the line saying a new allocation was asked for it


def enabled(campaign: Campaign) -> bool:
    s = campaign.settings
    return (s.launcher == "slurm" and s.slurm_allocation == "campaign") or (
        s.launcher == "ray" and s.ray_allocation == "campaign"
    )


def folder(campaign: Campaign) -> Path:
    return campaign.folder / campaign.settings.launcher  # slurm/ or ray/


def _engine(campaign: Campaign) -> ModuleType:
    if campaign.settings.launcher == "ray":
        from autoresearch_skills.launch import ray_allocation

        return ray_allocation
    from autoresearch_skills.launch import slurm_allocation

    return slurm_allocation


def ray_request(campaign: Campaign) -> ray_allocation.Request:
    """What the campaign's holders on Ray hold: one run's placement each, `parallel` of them."""
    from autoresearch_skills.launch import ray_allocation
    from autoresearch_skills.launch.ray import resource_arguments

    s = campaign.settings
    resources = {k: v for k, v in s.cluster_resources().items() if k != "partition"}
    return ray_allocation.Request(
        name=s.name,
        address=s.ray_address,
        working_dir=s.ray_working_dir,
        parallel=s.pool().parallel,
        placement=resource_arguments(resources),
        grace=parse_duration(s.ray_grace),
    )


def request(campaign: Campaign, remaining: float | None) -> Request:
    """What one allocation holds: a task per slot, each with a run's GPUs, CPUs and memory; until the
    campaign's deadline (`remaining` seconds from now; None: no budget)."""
    s = campaign.settings
    pool = s.pool()
    return Request(
        name=s.name,
        parallel=pool.parallel,
        gpus_per_run=pool.cluster_gpus(),
        cpus_per_run=int(s.cpus or s.cpus_per_run or 1),
        mem_per_run=str(s.mem) if s.mem else None,
        partition=str(s.partition) if s.partition else None,
        account=str(s.account) if s.account else None,
        qos=str(s.qos) if s.qos else None,
        constraint=s.constraint,
        deadline=None if remaining is None else time.time() + remaining,
        grace=parse_duration(s.slurm_grace),
    )


def ensure(campaign: Campaign, remaining: float | None) -> str:
    """The allocation the next run starts in: '' when the live one is adopted, else the line saying
    that a new one was asked for (and how the one before ended)."""
    asked = ray_request(campaign) if campaign.settings.launcher == "ray" else request(campaign, remaining)
    _, said = _engine(campaign).ensure(folder(campaign), asked)
    return said


def beat(campaign: Campaign) -> None:
    if enabled(campaign):
        _engine(campaign).beat(folder(campaign))


def release(campaign: Campaign) -> str:
    return _engine(campaign).release(folder(campaign)) if enabled(campaign) else ""


def opening(campaign: Campaign) -> str | None:
    """The loop's first word on it: the live allocation taken up again (a resume), or that one will
    be asked for at the first run; None when the campaign has no allocation of its own."""
    if not enabled(campaign):
        return None
    if campaign.settings.launcher == "ray":
        return _engine(campaign).adopted(folder(campaign)) or (
            "Ray allocation: holders for the whole campaign, submitted when the next run starts; each runs the runs one after another"
        )
    return _engine(campaign).adopted(folder(campaign)) or (
        "Slurm allocation: one for the whole campaign, asked for when the next run starts; each run a job step in it"
    )


def line(campaign: Campaign) -> str | None:
    """`slurm allocation: job 812 on gpu-07 (cpu=16,gres/gpu=4), 5h12m left; wall: 3m queued ...`;
    None when the campaign has no allocation of its own."""
    if not enabled(campaign):
        return None
    return _engine(campaign).describe(folder(campaign))
