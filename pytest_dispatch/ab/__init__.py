"""A/B: two versions of the code measured in one job, round by round.

``pytest-dispatch ab --base REF`` (and its twin ``pytest --dispatch-ab=REF``) starts
two persistent pytest worker processes, base and head, each importing its own
tree's code, and runs the same tests in both.  At every ``dispatch_meter.measure``
both sides warm up and then the coordinator asks them for rounds in turn, so the
comparison is made on pairs of rounds taken seconds apart rather than on runs
taken hours apart (see pytest_dispatch.judgement.paired).

Modules: ``channel`` (JSON lines over inherited pipes), ``trees`` (a git ref as a
temporary worktree), ``worker`` (the pytest side), ``coordinator`` (the job),
``verdicts`` (what is compared and how it is shown), ``placement`` (the sessions' CPUs),
``counted`` (a job in counted mode), ``sidepaths`` (test paths one side does not have).
"""
