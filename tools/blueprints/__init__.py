"""Blueprints (AgentJet's format), one concept per module:

    reading    the format: sections, the Blueprint record, `parse`, names, GPUs, finding the files
    checking   `check`/`check_all`: what would break a run before it starts (paths, python, YAML,
               the AgentJet/verl settings), and where a run writes its validation figures
    writing    `ars blueprint new`: filled blueprints from flags or a plan file
    resultdir  what a run leaves in its result dir: attempts in trial_log.md, results.md,
               finish.flag (last), and the status read back from them

    swarm      `ars blueprint run`: many blueprints at once on the campaign engine's GPU pool, each
               attempt an experiment of a campaign (the engine drives; this fills its slots)

`autoresearch_skills.blueprint` is the command line and re-exports the public names. The parts
(reading, checking, writing, resultdir) know nothing of campaigns; only `swarm` drives the engine.
"""
