"""Cloud drivers: one module per driver family, all behind :class:`CloudDriver`."""

from elasticsite.clouds.base import (
    SITE_TAG,
    WORKER_TAG,
    CloudDriver,
    CloudError,
    Instance,
    InstanceState,
)

__all__ = ["SITE_TAG", "WORKER_TAG", "CloudDriver", "CloudError", "Instance", "InstanceState"]
