"""Reference components shipped with hinge, registered through the plugin hooks
(``hinge.builtin.plugin``), and the bundled models (``hinge.builtin.models``)."""

from __future__ import annotations

from hinge import default_model_path
from hinge.builtin.models import random_model_path

__all__ = ["default_model_path", "random_model_path"]
