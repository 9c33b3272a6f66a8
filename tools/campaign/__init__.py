"""The campaign engine. Layers import downwards only:

    cli, exp_cli      the `ars campaign` and `ars exp` commands (wiring)
    loop              the unattended loop: fills free slots with proposals (`proposals`)
    scheduler         reaps finished runs, starts queued ones, polls the run watchers
    experiment        the lifecycle of one attempt: open, commit, launch on a slot (`pool`), record
    judge             a finished run's metric, status, pace and fingerprint (`noise`, `fingerprint`)
    finish            the end of a campaign, whoever drove it
    store, config     one campaign's folder, settings, state and ledger; the campaign.yaml schema
"""
