"""The ``service-recovery`` family (see :mod:`.generator`): a broken service, fixed, not masked."""

from sparring.tasks.families.service_recovery.generator import FAMILY, ServiceRecoveryGenerator, service_task

__all__ = ["FAMILY", "ServiceRecoveryGenerator", "service_task"]
