"""Batch-system adapters: one module per batch system, all behind :class:`BatchSystem`."""

from elasticsite.batch.base import BatchError, BatchSystem, BatchView, JobRequest, Node, NodeState

__all__ = ["BatchError", "BatchSystem", "BatchView", "JobRequest", "Node", "NodeState"]
