"""Range checks of settings, shared by the config dataclasses (their ``__post_init__``).

Messages start with ``name=value`` so that the Hydra guard can prefix the section
(``reward.lam=-5.0 is out of range: expected lam >= 0``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def check_range(obj: Any, name: str, low: float | None = None, high: float | None = None, *, low_open: bool = False, optional: bool = False) -> None:
    """Raise ``ValueError`` unless ``obj.name`` is a finite number with ``low <= obj.name <=
    high`` (``low < …`` with ``low_open``); ``None`` passes when ``optional``."""
    value = getattr(obj, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r} is not a number")
    if not math.isfinite(value):  # inf passes "x >= low", NaN passes every comparison
        raise ValueError(f"{name}={value!r} is not a finite number")
    bad_low = low is not None and (value <= low if low_open else value < low)
    bad_high = high is not None and value > high
    if bad_low or bad_high:
        parts = []
        if low is not None:
            parts.append(f"{name} {'>' if low_open else '>='} {low:g}")
        if high is not None:
            parts.append(f"{name} <= {high:g}")
        raise ValueError(f"{name}={value!r} is out of range: expected {' and '.join(parts)}")


def check_choice(obj: Any, name: str, choices: Iterable[str], *, optional: bool = False) -> None:
    """Raise ``ValueError`` unless ``obj.name`` is one of ``choices``."""
    value = getattr(obj, name)
    if value is None and optional:
        return
    options = list(choices)
    if value not in options:
        raise ValueError(f"{name}={value!r} is not one of {options}")
