"""The campaign engine. Layers import downwards only (ARCHITECTURE.md has the whole table, and
tests/test_architecture.py holds the code to it):

    drivers   loop        the unattended loop: fills free slots with proposals (`proposals`)
    engine    scheduler   reaps finished runs, starts queued ones; `watch` polls the run watchers
              experiment  the life of one attempt: open, commit, launch on a slot (`pool`), record
              workdirs    where an attempt is checked out (in place, or a worktree of the campaign)
              judge       a finished run's metric, status, pace and fingerprint (`noise`, `fingerprint`)
              status      where a campaign stands; finish: its end, whoever drove it
              config      a campaign file validated before anything starts
    model     record      the typed record of an attempt in flight (Experiment, Phase, Result)
              state       state.json's one owner: every read and write of the in-flight set
              store       one campaign's folder: settings, ledger, pause, verdict
              settings    every setting declared once: validation, Settings, `campaign init` options
    parts     noise       keep/candidate/discard and the one best; fingerprint, pool, proposals
    base      paths       where campaigns live
The commands (`cli`, `exp_cli`) sit on top of all of it.
"""
