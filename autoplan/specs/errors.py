"""The two error types of the project.

`AutoplanError` is bad user input: the CLI catches it once and prints its message as one line with
exit code 2. `InfeasiblePlan` is a plan that cannot run (a rule broken, memory exceeded); the search
treats it as data, the CLI as bad input when the user pinned it.
"""
from __future__ import annotations


class AutoplanError(ValueError):
    """Bad user input. The message is one line: what is wrong, with the values, and what to do."""


class InfeasiblePlan(AutoplanError):
    """A parallel plan that cannot run for this model, training shape and cluster.

    `reason` is a short machine-readable tag (e.g. "tp_divides_heads", "out_of_memory") so the
    search can count why trials were rejected; the message says it for people.
    """

    def __init__(self, message: str, reason: str = "infeasible"):
        super().__init__(message)
        self.reason = reason


class SchemaError(AutoplanError):
    """A JSON document that is not what it claims to be (wrong schema, missing or bad field)."""
