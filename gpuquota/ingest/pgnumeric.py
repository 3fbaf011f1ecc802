"""A percentage column's value in PostgreSQL's binary `numeric` form, for a `COPY` straight
into the raw tables (`storage.py`).

The judge's rows carry percentages as floats (or ints) and the columns are
`numeric(5,2)`: staged as `float8`, PostgreSQL's cast rounded them. Written straight, the
value must be the one that cast gives: the float's 15 significant digits (`float8` to
`numeric`), rounded half away from zero at two decimals (the column's scale). Each distinct
value is worked out once per process: a window's percentages are few distinct values.
"""

import struct
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache

from psycopg.adapt import Dumper
from psycopg.postgres import types as pg_types
from psycopg.pq import Format

SCALE = 2  # every numeric column of the raw tables is numeric(5,2)
NBASE = 10_000  # numeric's digits are base 10,000
NEGATIVE = 0x4000


@lru_cache(maxsize=65_536)
def numeric_binary(value: float | int) -> bytes:
    """`value` as `CAST(value::float8 AS numeric(p, 2))` gives it, in numeric's binary form
    (digit count, weight, sign, display scale, base-10,000 digits)."""
    hundredths = int(
        Decimal(f"{float(value):.15g}").scaleb(SCALE).to_integral_value(rounding=ROUND_HALF_UP)
    )
    whole, fraction = divmod(abs(hundredths), 10**SCALE)
    digits = [fraction * 10 ** (4 - SCALE)]
    while whole:
        whole, digit = divmod(whole, NBASE)
        digits.insert(0, digit)
    if hundredths == 0:
        digits = []
    weight = len(digits) - 2 if digits else 0  # the last digit is the fraction's
    sign = NEGATIVE if hundredths < 0 else 0
    return struct.pack(f">hhHH{len(digits)}h", len(digits), weight, sign, SCALE, *digits)


class PercentBinaryDumper(Dumper):
    """Dumps a float or int into a numeric(5,2) column of a binary COPY
    (`cursor.adapters.register_dumper(None, PercentBinaryDumper)`, then `set_types`)."""

    format = Format.BINARY
    oid = pg_types["numeric"].oid
    dump = staticmethod(numeric_binary)
