"""Reading the apps' settings from the environment: a bad value stops the start with the
variable's name and the reason, never later in a request."""

import importlib.util
import os

from django.core.exceptions import ImproperlyConfigured


def env_int(name: str, default: int, minimum: int) -> int:
    """The integer in `name` (`default` when unset or empty), at least `minimum`."""
    raw = os.environ.get(name, "")
    try:
        value = int(raw) if raw else default
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def modules_installed(*names: str) -> bool:
    """Whether every module named can be imported (an optional extra, such as LDAP's, is
    installed), without importing it."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in names)
    except (ImportError, ValueError):
        return False
