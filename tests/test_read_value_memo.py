"""Values read again come from symcalc.query.values' memo (a plan reads the same ~90 values in
each of its ~140 questions): the same reading, a new record each time, never another
quantity record's, and never a refusal turned into a value."""

from __future__ import annotations

import dataclasses

import pytest

import symcalc
from symcalc.errors import DimensionError, DomainError
from symcalc.library.records import Interval
from symcalc.query.values import read_value


def test_a_value_read_again_is_a_new_record_with_the_same_reading():
    q = symcalc.default_library().quantity("gpu_memory")
    a, b = read_value(q, "80 GB"), read_value(q, "80 GB")
    # 80 GB = 80e9 bytes (SI gigabytes, the library's base unit for memory is the byte)
    assert a is not b and (a.name, a.text, a.magnitude) == (b.name, b.text, b.magnitude) == ("gpu_memory", "80 GB", 80e9)
    b.origin = "a preset"                      # a caller marks its own copy ...
    assert read_value(q, "80 GB").origin == ""  # ... and the next reading is the user's again


def test_a_refused_value_is_refused_every_time():
    q = symcalc.default_library().quantity("gpu_memory")
    for _ in range(2):
        with pytest.raises(DimensionError):
            read_value(q, "80 s")


def test_another_quantity_record_reads_by_its_own_bounds():
    q = symcalc.default_library().quantity("gpu_memory")
    assert read_value(q, "80 GB").magnitude == 80e9
    # the same name, another record: at most 64 GB (as a library edited between two loads)
    small = dataclasses.replace(q, domain=Interval(0.0, 64e9, True, False))
    with pytest.raises(DomainError):
        read_value(small, "80 GB")
    with pytest.raises(DomainError):        # and not kept for it either way
        read_value(small, "80 GB")
    assert read_value(q, "80 GB").magnitude == 80e9
