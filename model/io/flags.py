"""argparse types for numeric flags: a value out of range is refused by argparse itself, with
the flag's name ("argument --log-every: must be at least 1, not 0"), before any framework is
imported; a 0 that would divide, a negative rate that would train backwards or a negative
count that would loop for ever never reaches the run."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    return _at_least(_whole(text), 1)


def non_negative_int(text: str) -> int:
    return _at_least(_whole(text), 0)


def positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:  # also NaN
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {text}")
    return value


def _at_least(value: int, least: int) -> int:
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number, not {text!r}") from None
