"""Urgent computing (SPRUCE): right-of-way tokens, urgent sessions and their audit log.

:mod:`.tokens` holds the pure rules (a token's life, who may submit at which urgency
where), :mod:`.store` their SQLite state and the submit filter that authenticates each
urgent request and audits it.
"""
