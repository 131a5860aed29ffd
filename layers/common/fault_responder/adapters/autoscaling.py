"""EC2 Auto Scaling for the training auto-resume workflow: the size of a capacity provider's group, and growing it
to replace the warm spares a relaunch took (fault_responder.resume.spares)."""

from __future__ import annotations

from typing import Any, cast

from botocore.client import BaseClient
from botocore.exceptions import BotoCoreError, ClientError

from fault_responder.resume.spares import ScalingError


class AutoScalingAdapter:
    def __init__(self, autoscaling: BaseClient) -> None:
        self._autoscaling = cast(Any, autoscaling)

    def group_size(self, name: str) -> tuple[int, int] | None:
        try:
            groups = self._autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
        except (ClientError, BotoCoreError) as error:
            raise ScalingError(_why(error)) from error
        for group in groups.get("AutoScalingGroups", []):
            if group.get("AutoScalingGroupName") == name:
                return int(group["DesiredCapacity"]), int(group["MaxSize"])
        return None

    def set_desired_capacity(self, name: str, desired: int) -> None:
        try:
            # HonorCooldown=False: a spare taken is to be replaced now, whatever the group's last activity.
            self._autoscaling.set_desired_capacity(
                AutoScalingGroupName=name, DesiredCapacity=desired, HonorCooldown=False
            )
        except (ClientError, BotoCoreError) as error:
            raise ScalingError(_why(error)) from error


def _why(error: Exception) -> str:
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return f"{details.get('Code', 'error')}: {details.get('Message', '')}".strip()
    return type(error).__name__
