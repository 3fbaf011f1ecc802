"""The small parsers of a batch's values, in one place for every tier that reads them:
the structure check (`protocol.py`), the record judge (`records.py`), the GPU placement
(`placement.py`) and the batch itself (`batches.py`). Each returns None for what it
cannot read; the caller says why it refuses."""

import re
import uuid
from datetime import UTC, datetime
from functools import lru_cache
from itertools import repeat
from operator import itemgetter

from gpuquota.inventory.models import GPU_UUID_RE


@lru_cache(maxsize=16384)
def instant_parse(text: str) -> datetime | None:
    """An aware instant from ISO 8601 text (`Z` allowed), in UTC, or None. In UTC: the
    database refuses offsets beyond ±15:59, which ISO 8601 text may carry. Cached: a
    minute's windows repeat in every node's batch."""
    try:
        value = datetime.fromisoformat(text)
        return value.astimezone(UTC) if value.tzinfo is not None else None
    except (ValueError, OverflowError):
        return None


@lru_cache(maxsize=65536)
def instant_text(epoch: int) -> str:
    """The protocol's text of an instant given in epoch seconds (window bounds repeat for
    every GPU: cached)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def uuid_normal(raw) -> str | None:
    """The stored form of an NVML UUID (`GPU-`/`MIG-` + lower-case hex), or None."""
    if type(raw) is not str or not GPU_UUID_RE.match(raw):
        return None
    return raw[:4].upper() + raw[4:].lower()


def uuid_parse(value) -> uuid.UUID | None:
    """A UUID from its text (batch and event ids), or None."""
    if type(value) is not str:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def release_parse(text: object) -> tuple[int, int, int] | None:
    """(major, minor, patch) of an agent version such as `1.2.0` or `1.2.0rc1`, or None for
    text of another shape (another source that speaks the protocol names itself freely)."""
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)", text) if isinstance(text, str) else None
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def fields_of(records: list[dict], names: tuple[str, ...]) -> list:
    """Each named field of every record (dicts), a column a name, None where a record lacks
    it. When the records share one set of keys (an agent's samples do) they are read at
    once, a record a call in C, and turned into columns by `zip`; else a field at a time."""
    keys = tuple(records[0]) if records else ()
    if len(keys) > 1 and set(map(len, records)) == {len(keys)}:
        try:  # records of the first's size that hold all of its keys hold just those
            columns = dict(zip(keys, zip(*map(itemgetter(*keys), records), strict=True),
                               strict=True))
        except KeyError:
            pass
        else:
            absent = (None,) * len(records)
            return [columns.get(name, absent) for name in names]
    return [list(map(dict.get, records, repeat(name))) for name in names]
