"""Reading PBS values in either format: walltimes, counts, times in the server's zone,
JSON and Torque's XML, each failure one :class:`BatchError` naming the command."""

from __future__ import annotations

import calendar
import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from elasticsite.batch.base import BatchError

__all__ = [
    "as_int",
    "load_json",
    "load_xml",
    "parse_walltime",
    "request_cores",
    "time_zone",
    "timestamp",
    "xml_value",
]


# -- values ------------------------------------------------------------------------------


def parse_walltime(text: Any) -> float | None:
    """``[[[D:]HH:]MM:]SS`` (or plain seconds) to seconds; ``None`` when absent."""
    if text is None or text == "":
        return None
    if isinstance(text, int | float):
        return float(text)
    parts = str(text).strip().split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        raise BatchError(f"PBS walltime {text!r} is not [[HH:]MM:]SS") from None
    seconds = 0.0
    for factor, value in zip((1, 60, 3600, 86400), reversed(numbers), strict=False):
        seconds += factor * value
    return seconds


def as_int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def request_cores(resources: Mapping[str, Any]) -> int:
    """Cores a job asked for: ``ncpus``, else the sum over ``select=``, else ``nodes=N:ppn=M``."""
    ncpus = as_int(resources.get("ncpus"), 0)
    if ncpus > 0:
        return ncpus
    for resource, per_part in (("select", "ncpus="), ("nodes", "ppn=")):
        spec = str(resources.get(resource) or "")
        if spec:
            return _spec_cores(spec, per_part)
    return 1


def _spec_cores(spec: str, per_part: str) -> int:
    """Cores of a ``select=`` or ``nodes=`` spec: over its ``+``-separated parts, each
    part's count (its leading number, else 1) times its ``per_part`` value (else 1)."""
    total = 0
    for part in spec.split("+"):
        fields = part.split(":")
        count = as_int(fields[0], 1) if fields[0].isdigit() else 1
        per = next((as_int(f[len(per_part) :], 1) for f in fields if f.startswith(per_part)), 1)
        total += count * per
    return max(total, 1)


def time_zone(name: str) -> ZoneInfo:
    """The server's zone by IANA name; an unknown name is one :class:`BatchError`."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BatchError(
            f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris')"
        ) from None


def timestamp(value: Any, zone: ZoneInfo) -> float | None:
    """Epoch seconds (Torque) or PBS's ``"Wed Apr 14 23:34:17 2021"`` in the server's zone."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) or str(value).strip().isdigit():
        return float(value)
    try:
        parsed = time.strptime(str(value).strip(), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        raise BatchError(f"PBS time {value!r} is not like 'Wed Apr 14 23:34:17 2021'") from None
    naive = calendar.timegm(parsed)
    # the zone's offset at that instant (DST-aware), found from the UTC reading
    offset = datetime.fromtimestamp(naive, zone).utcoffset()
    return float(naive - (offset.total_seconds() if offset else 0.0))


# -- the two formats ---------------------------------------------------------------------


def xml_value(element: ET.Element) -> Any:
    if len(element):
        return {child.tag: xml_value(child) for child in element}
    return (element.text or "").strip()


def load_json(text: str, what: str) -> dict[str, Any]:
    if not text.strip():
        raise BatchError(f"{what} printed nothing (expected JSON from `-F json`)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BatchError(
            f"{what} printed malformed JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    if not isinstance(data, dict):
        raise BatchError(f"{what} printed JSON that is not an object")
    return data


def load_xml(text: str, what: str) -> ET.Element | None:
    """The ``<Data>`` root, or ``None`` when the command printed nothing (no jobs/nodes)."""
    text = text.strip()
    if not text:
        return None
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise BatchError(f"{what} printed malformed XML ({exc})") from None
    if root.tag != "Data":
        raise BatchError(f"{what} printed XML rooted at <{root.tag}>, expected <Data>")
    return root
