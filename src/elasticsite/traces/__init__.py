"""Workload traces: reading the Standard Workload Format and the Lublin99 model.

Below the simulator and the advisor, which both read them.
"""
