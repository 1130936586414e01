"""FA4's on-disk compile cache (``flash_attn/cute/cache_utils.py``): off by default upstream,
so every process recompiles each kernel variant (1.5-4.4 s each). Its switches are read when
``flash_attn.cute`` is imported, so they are set here first."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

logger = logging.getLogger(__name__)

ENABLED = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"
DIRECTORY = "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"


def default_cache_dir(env: MutableMapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/hinge/flash_attention_cute_dsl`` (``~/.cache/...``): survives reboots,
    unlike the package default under /tmp."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hinge" / "flash_attention_cute_dsl"


def configure_jit_cache(enabled: bool, directory: str | None,
                        env: MutableMapping[str, str] | None = None) -> str | None:
    """Set the cache switches unless the environment already sets them (the user's word wins);
    returns the cache directory in effect, or None when the cache is off. Warns when
    flash_attn.cute was imported before (its switches are then already read)."""
    env = os.environ if env is None else env
    if "flash_attn.cute" in sys.modules and env is os.environ:
        logger.warning("fa4: flash_attn.cute was imported before the backend was built; its JIT "
                       "cache follows %s=%s", ENABLED, env.get(ENABLED, "0"))
    env.setdefault(ENABLED, "1" if enabled else "0")
    if env[ENABLED] != "1":
        return None
    env.setdefault(DIRECTORY, str(Path(directory) if directory else default_cache_dir(env)))
    return env[DIRECTORY]
