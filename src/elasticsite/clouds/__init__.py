"""Cloud drivers: one module per driver family, all behind
:class:`elasticsite.clouds.base.CloudDriver`.

Nothing is imported here: the local cloud's worker processes import a few modules of
this package, and hundreds of them start at once on a small machine.
"""
