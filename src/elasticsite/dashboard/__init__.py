"""The live dashboard: the site at a glance, served read-only by the project's server."""
