"""Problems found in input data, and the one exception the data API raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in an input file.

    ``str(problem)`` is the one-line form every command prints:
    ``FILE:LINE: field: what is wrong (what was expected)``.
    ``line`` is the 1-based line in ``file`` (0 when the path itself is the problem).
    """

    file: str
    line: int
    field: str
    message: str
    expected: str
    severity: Severity = "error"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.message} ({self.expected})"


class DataValidationError(ValueError):
    """Raised by :func:`rescue_env.data.load_dialogues` when the input has errors.

    Nothing is returned half-way: the whole input is checked first. ``problems`` lists
    every error (warnings are not included); ``str(error)`` is one problem per line.
    """

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
