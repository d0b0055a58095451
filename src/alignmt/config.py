"""Config to code: where the configs live, and the one helper that turns a node into an object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra.utils
from hydra.errors import InstantiationException
from omegaconf import DictConfig

# Package data: in the repository a link to the top-level conf/, in a wheel a copy of it.
CONF_DIR = Path(__file__).resolve().parent / "conf"


class ConfigError(ValueError):
    """A config node could not be turned into the object it names."""


def instantiate(node: DictConfig, /, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, with errors that name the config key at fault.

    Every config group file names its class in `_target_`; that class's typed `__init__` is the
    schema, so a misspelt key fails here with the class and key named.
    """
    key = node._get_full_key(None) if isinstance(node, DictConfig) else "?"
    try:
        return hydra.utils.instantiate(node, **kwargs)
    except InstantiationException as e:
        raise ConfigError(f"config '{key}': {e}") from e
