"""One finding about a platform file, shared by every check of the platform room."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["Problem"]


class Problem(BaseModel):
    """One finding about a platform file: ``path`` like ``teams[1].quotas[0].flavor``."""

    model_config = ConfigDict(frozen=True)

    path: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message
