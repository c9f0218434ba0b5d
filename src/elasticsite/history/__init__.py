"""What the services record for each other, below all of them.

The manager records queue waits and worker allocations for the advisor
(:mod:`.recorder` into :mod:`.observations`, where urgent drills add theirs too) and
samples of the site for the dashboard (:mod:`.samples`); each service reads what it
needs from here without importing another.
"""
