"""Trace-driven discrete-event simulation of an elastic site."""
