"""SWF reader and writer: a hand-written archive-style trace, cleaning, errors, round trips.

``data/small.swf`` is nine jobs shaped after Parallel Workloads Archive traces: right-
aligned columns, floats in time fields, -1s, header values with text after the
number, a cancelled job without processors and a job past its requested time.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import math
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticsite.traces.swf import (
    FIELDS,
    CleaningReport,
    CleaningRules,
    SWFError,
    SWFHeader,
    SWFReader,
    SWFRecord,
    SWFTrace,
    read_swf,
    write_swf,
)

SMALL = Path(__file__).parent / "data" / "small.swf"
RAW = CleaningRules.none()
INT_FIELDS = {
    "job_number", "allocated_processors", "requested_processors", "status", "user_id",
    "group_id", "executable_number", "queue_number", "partition_number", "preceding_job_number",
}  # fmt: skip


def column(trace: SWFTrace, name: str) -> list[float]:
    return getattr(trace, name).tolist()


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def job_line(number: int = 1, **fields: float | str) -> str:
    """A valid job line (60 s on one processor), with some fields replaced."""
    defaults = [number, 0, 0, 60, 1, -1, -1, 1, 120, -1, 1, 1, 1, -1, 1, -1, -1, -1]
    values: dict[str, object] = dict(zip(FIELDS, defaults, strict=True))
    values.update(fields)
    return " ".join(str(values[f]) for f in FIELDS)


# -- parsing the hand-written trace ---------------------------------------------------


def test_raw_trace_keeps_every_job_and_value_as_written() -> None:
    trace = read_swf(SMALL, rules=RAW)

    assert len(trace) == 9
    assert column(trace, "job_number") == list(range(1, 10))
    assert column(trace, "submit_time") == [0, 30.5, 60, 120, 180, 240, 300, 360, 420.75]
    assert column(trace, "run_time") == [3600.5, 900, -1, 4000, 600, 300, -1, 100, 59.5]
    assert column(trace, "allocated_processors") == [16, -1, 0, 8, 4, 64, 2, 0, 1]
    assert column(trace, "average_cpu_time")[0] == 3500.25
    assert column(trace, "status") == [1, 1, 5, 1, 1, 1, 0, 1, 1]
    assert column(trace, "preceding_job_number")[5] == 5
    assert column(trace, "think_time")[5] == 60
    for name in FIELDS:
        expected = np.int64 if name in INT_FIELDS else np.float64
        assert getattr(trace, name).dtype == expected, name
    assert trace.report == CleaningReport(records_read=9, kept=9)


def test_records_are_typed_ints_and_floats() -> None:
    first = next(iter(SWFReader(SMALL, rules=RAW)))

    assert first == SWFRecord(
        1, 0.0, 12.0, 3600.5, 16, 3500.25, -1.0, 16, 7200.0, -1.0, 1, 3, 1, -1, 2, 1, -1, -1.0
    )
    assert type(first.job_number) is int and type(first.allocated_processors) is int
    assert type(first.submit_time) is float


def test_header_keys_values_and_typed_integers() -> None:
    header = read_swf(SMALL).header

    assert header.max_nodes == 144
    assert header["MaxNodes"] == ("144 (each an 8-way SMP)",)
    assert header.max_procs == 1152
    assert header.max_runtime == 129600
    assert header.max_memory == -1
    assert (header.max_jobs, header.max_records, header.max_queues) == (9, 9, 3)
    assert header.max_partitions == 1
    assert header.unix_start_time == 957164400
    assert header.first("Version") == "2.2"
    assert header.first("version") == "2.2"
    assert header["Queue"] == ("1 interactive", "2 normal", "3 express")
    assert header["Note"] == (
        "job 3 was cancelled before it started",
        "job 4 ran past its requested time",
    )
    assert header.first("Acknowledge") == "nobody; hand-written to look like an archive trace"
    assert header.first("Information") == (
        "https://www.cs.huji.ac.il/labs/parallel/workload/\n"
        "the layout follows the Standard Workload Format 2.2"
    )
    assert header.first("EndTime") == "Mon May 01 06:00:00 PDT 2000"
    assert header.get_int("TimeZoneString") is None
    assert header.first("MaxGpus") is None and header.get_int("MaxGpus") is None
    assert "Queue" in header and "Nope" not in header
    assert list(header)[:3] == ["Version", "Computer", "Installation"]
    assert len(header) == 23
    assert header.comments == [""]


def test_indented_lines_after_a_key_continue_it_unless_they_start_a_standard_key() -> None:
    header = SWFHeader()
    for line in [" Note: one", "      two", "   MaxProcs: 8", " ----", "   not a key"]:
        header.add_comment(line)

    assert header.entries == [
        ("Note", "one\ntwo"),
        ("MaxProcs", "8"),
        (None, "----"),
        (None, "not a key"),
    ]


# -- cleaning -------------------------------------------------------------------------


def test_default_cleaning_counts_and_repairs() -> None:
    trace = read_swf(SMALL)

    assert trace.report == CleaningReport(
        records_read=9,
        allocated_from_requested=1,
        dropped_cancelled_without_processors=1,
        dropped_non_positive_processors=1,
        dropped_non_positive_run_time=1,
        requested_processors_from_allocated=1,
        requested_time_from_run_time=1,
        run_time_clipped=1,
        kept=6,
    )
    assert trace.report.dropped == 3
    assert column(trace, "job_number") == [1, 2, 4, 5, 6, 9]
    jobs = {r.job_number: r for r in trace.records()}
    assert jobs[2].allocated_processors == 8
    assert jobs[4].run_time == 3600
    assert jobs[5].requested_time == 600
    assert jobs[6].requested_processors == 64
    assert trace.report.summary().startswith("records_read=9, allocated_from_requested=1")


@pytest.mark.parametrize(
    ("overrun", "kept", "run_time_of_4", "counts"),
    [
        ("clip", 6, 3600.0, {"run_time_clipped": 1}),
        ("drop", 5, None, {"dropped_overrun": 1}),
        ("keep", 6, 4000.0, {}),
    ],
)
def test_overrun_clip_drop_or_keep(
    overrun: Literal["clip", "drop", "keep"],
    kept: int,
    run_time_of_4: float | None,
    counts: dict[str, int],
) -> None:
    rules = dataclasses.replace(CleaningRules(), overrun=overrun)
    trace = read_swf(SMALL, rules=rules)

    assert len(trace) == kept
    assert {r.job_number: r.run_time for r in trace.records()}.get(4) == run_time_of_4
    assert trace.report.run_time_clipped == counts.get("run_time_clipped", 0)
    assert trace.report.dropped_overrun == counts.get("dropped_overrun", 0)


def test_each_rule_can_be_turned_off_alone() -> None:
    on = read_swf(SMALL).report
    for rule in [f.name for f in dataclasses.fields(CleaningRules) if f.name != "overrun"]:
        off: dict[str, Any] = {rule: False}
        report = read_swf(SMALL, rules=dataclasses.replace(CleaningRules(), **off)).report
        counter = {
            "fill_allocated_processors": "allocated_from_requested",
            "drop_cancelled_without_processors": "dropped_cancelled_without_processors",
            "drop_non_positive_processors": "dropped_non_positive_processors",
            "drop_non_positive_run_time": "dropped_non_positive_run_time",
            "fill_requested_processors": "requested_processors_from_allocated",
            "fill_requested_time": "requested_time_from_run_time",
        }[rule]
        assert getattr(report, counter) == 0, rule
        assert getattr(on, counter) == 1, rule


def test_without_the_cancelled_rule_the_processor_rule_drops_the_cancelled_job() -> None:
    rules = dataclasses.replace(CleaningRules(), drop_cancelled_without_processors=False)
    report = read_swf(SMALL, rules=rules).report

    assert report.dropped_non_positive_processors == 2
    assert report.kept == 6


def test_without_filling_allocated_processors_unknown_allocation_is_dropped() -> None:
    rules = dataclasses.replace(CleaningRules(), fill_allocated_processors=False)
    trace = read_swf(SMALL, rules=rules)

    assert 2 not in column(trace, "job_number")
    assert trace.report.dropped_non_positive_processors == 2


def test_sort_by_submit_is_stable_and_optional(tmp_path: Path) -> None:
    lines = [job_line(1, submit_time=50), job_line(2, submit_time=10), job_line(3, submit_time=50)]
    path = write_text(tmp_path / "t.swf", "\n".join(lines) + "\n")

    assert column(read_swf(path), "job_number") == [1, 2, 3]
    assert column(read_swf(path, sort_by_submit=True), "job_number") == [2, 1, 3]


# -- files: gzip, streaming, odd but valid layouts ------------------------------------


@pytest.mark.parametrize("name", ["trace.swf.gz", "trace.swf", "trace"])
def test_gzip_is_detected_by_magic_bytes(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(SMALL.read_bytes()))
    plain, zipped = read_swf(SMALL), read_swf(path)

    assert list(zipped.records()) == list(plain.records())
    assert zipped.header.entries == plain.header.entries
    assert list(SWFReader(path)) == list(plain.records())


@pytest.mark.parametrize("block_size", [1, 100, 1000, 1 << 20])
@pytest.mark.parametrize("rules", [RAW, CleaningRules()], ids=["raw", "clean"])
def test_streaming_equals_bulk(block_size: int, rules: CleaningRules) -> None:
    bulk = read_swf(SMALL, rules=rules)
    with SWFReader(SMALL, rules=rules, block_size=block_size) as reader:
        assert reader.header.max_procs == 1152  # known before the first record
        streamed = list(reader)

    assert streamed == list(bulk.records())
    assert reader.report == bulk.report
    assert reader.header.entries == bulk.header.entries


def test_streaming_equals_bulk_on_a_messy_trace_across_many_blocks(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    choice = rng.choice
    lines = [
        job_line(
            i,
            submit_time=i * 10 + choice([0, 0.5]),
            run_time=choice([-1, 0, 30, 59.5, 7200]),
            allocated_processors=choice([-1, 0, 1, 64]),
            requested_processors=choice([-1, 0, 8]),
            requested_time=choice([-1, 60, 3600]),
            status=choice([0, 1, 5]),
        )
        for i in range(1, 3001)
    ]
    path = write_text(tmp_path / "messy.swf", "; MaxProcs: 64\n" + "\n".join(lines) + "\n")
    bulk = read_swf(path)
    with SWFReader(path, block_size=4096) as reader:
        streamed = list(reader)

    assert streamed == list(bulk.records())
    assert reader.report == bulk.report
    assert 0 < bulk.report.kept < 3000
    every_rule_fired = dataclasses.replace(bulk.report, malformed_lines=1, dropped_overrun=1)
    assert all(dataclasses.astuple(every_rule_fired))


def test_tabs_crlf_blank_lines_trailing_comments_and_no_final_newline(tmp_path: Path) -> None:
    text = (
        "; MaxProcs: 4\r\n"
        "\r\n"
        + job_line(1).replace(" ", "\t")
        + "\r\n   \r\n"
        + job_line(2)
        + " ; resubmitted\r\n"
        + "; Note: a comment between jobs\n"
        + job_line(3, run_time=7.5)
    )
    path = write_text(tmp_path / "odd.swf", text)
    trace = read_swf(path, rules=RAW)

    assert column(trace, "job_number") == [1, 2, 3]
    assert column(trace, "run_time") == [60, 60, 7.5]
    assert trace.header.entries == [("MaxProcs", "4"), ("Note", "a comment between jobs")]


def test_integral_floats_are_accepted_in_integer_fields(tmp_path: Path) -> None:
    path = write_text(tmp_path / "t.swf", job_line(1, allocated_processors="32.0") + "\n")

    assert column(read_swf(path), "allocated_processors") == [32]


@pytest.mark.parametrize("slow_path", [False, True])
def test_integers_beyond_float_precision_stay_exact(tmp_path: Path, slow_path: bool) -> None:
    big = 2**62 + 1
    lines = [job_line(big, user_id=-big), *(["1e3 " * 18] if slow_path else [])]
    path = write_text(tmp_path / "t.swf", "\n".join(lines) + "\n")
    trace = read_swf(path, rules=RAW, on_error="skip")

    assert column(trace, "job_number")[0] == big
    assert column(trace, "user_id")[0] == -big
    assert len(trace) == 1 + slow_path


def test_empty_and_header_only_traces(tmp_path: Path) -> None:
    empty = read_swf(write_text(tmp_path / "empty.swf", ""))
    header_only = read_swf(write_text(tmp_path / "h.swf", "; MaxProcs: 8\n"))

    assert len(empty) == 0 and len(header_only) == 0
    assert header_only.header.max_procs == 8
    assert header_only.job_number.dtype == np.int64
    assert list(SWFReader(tmp_path / "empty.swf")) == []


# -- malformed lines ------------------------------------------------------------------


BAD_LINES = [
    (" ".join(job_line(7).split()[:17]), "expected 18 fields, found 17"),
    (job_line(7) + " 0", "expected 18 fields, found 19"),
    (job_line(7, run_time="abc"), "field 4 (run time) is not a number: 'abc'"),
    (job_line(7, submit_time="1,5"), "field 2 (submit time) is not a number: '1,5'"),
    (job_line(7, wait_time="1_000"), "field 3 (wait time) is not a number: '1_000'"),
    (job_line(7, run_time="nan"), "field 4 (run time) is not a finite number: 'nan'"),
    (job_line(7, think_time="inf"), "field 18 (think time) is not a finite number: 'inf'"),
    (
        job_line(7, allocated_processors=3.5),
        "field 5 (allocated processors) must be an integer, found '3.5'",
    ),
    (job_line(7, average_cpu_time="12s"), "field 6 (average CPU time) is not a number: '12s'"),
    (job_line(7, user_id=2**64), f"field 12 (user id) is out of range: '{2**64}'"),
]


@pytest.mark.parametrize(("bad", "reason"), BAD_LINES)
@pytest.mark.parametrize("block_size", [64, 1 << 20])
def test_malformed_line_error_names_file_line_and_problem(
    tmp_path: Path, bad: str, reason: str, block_size: int
) -> None:
    lines = [
        "; Version: 2.2",
        "; MaxProcs: 8",
        *(job_line(i) for i in range(1, 6)),
        "",
        bad,
        job_line(8),
    ]
    path = write_text(tmp_path / "trace.swf", "\n".join(lines) + "\n")

    with pytest.raises(SWFError) as caught:
        read_swf(path)
    assert str(caught.value) == f"{path}:9: {reason}"
    assert (caught.value.path, caught.value.line, caught.value.reason) == (str(path), 9, reason)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(SWFError, match=":9: "), SWFReader(path, block_size=block_size) as reader:
        list(reader)


def test_error_line_numbers_hold_deep_into_a_long_trace(tmp_path: Path) -> None:
    lines = ["; Version: 2.2", *(job_line(i) for i in range(1, 5001))]
    lines[4321] = lines[4321][:-3]  # drops the last field of job 4321, line 4322
    path = write_text(tmp_path / "trace.swf", "\n".join(lines) + "\n")

    with pytest.raises(SWFError, match=r"trace\.swf:4322: expected 18 fields, found 17$"):
        read_swf(path)


def test_skipping_counts_and_logs_bad_lines_and_keeps_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines = [job_line(1), BAD_LINES[0][0], job_line(3), BAD_LINES[2][0], job_line(5)]
    path = write_text(tmp_path / "trace.swf", "\n".join(lines) + "\n")

    with caplog.at_level(logging.WARNING, logger="elasticsite.traces.swf"):
        trace = read_swf(path, on_error="skip")

    assert column(trace, "job_number") == [1, 3, 5]
    assert trace.report.malformed_lines == 2
    assert trace.report.records_read == trace.report.kept == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}:2: expected 18 fields, found 17; line skipped",
        f"{path}:4: field 4 (run time) is not a number: 'abc'; line skipped",
    ]


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_swf(tmp_path / "missing.swf")


def _broken_gzip(kind: str) -> bytes:
    whole = gzip.compress(("".join(job_line(i) + "\n" for i in range(1, 3000))).encode())
    if kind == "truncated":
        return whole[: len(whole) // 2]
    if kind == "no trailer":
        return whole[:-4]
    if kind == "bad checksum":
        return whole[:-8] + bytes(8)
    if kind == "garbage after the magic number":
        return b"\x1f\x8b" + bytes(range(256)) * 8
    assert kind == "garbage deflate data"
    return whole[:10] + bytes(range(255, -1, -1)) * 8


@pytest.mark.parametrize(
    "kind",
    [
        "truncated",
        "no trailer",
        "bad checksum",
        "garbage after the magic number",
        "garbage deflate data",
    ],
)
@pytest.mark.parametrize("block_size", [64, 1 << 20])
def test_a_broken_gzip_stream_is_one_error_naming_the_file(
    tmp_path: Path, kind: str, block_size: int
) -> None:
    path = tmp_path / "trace.swf.gz"
    path.write_bytes(_broken_gzip(kind))
    with pytest.raises(SWFError) as caught:
        list(SWFReader(path, block_size=block_size))
    assert str(caught.value) == f"{path}: not a valid gzip stream (truncated?)"
    assert caught.value.line is None
    with pytest.raises(SWFError, match=r"not a valid gzip stream \(truncated\?\)$"):
        read_swf(path)


def test_swf_errors_survive_a_process_boundary() -> None:
    for error in (SWFError("t.swf", 3, "bad"), SWFError("t.gz", None, "not gzip")):
        copy = pickle.loads(pickle.dumps(error))
        assert (str(copy), copy.line) == (str(error), error.line)


# -- writing and round trips ----------------------------------------------------------


def test_written_file_is_plain_swf(tmp_path: Path) -> None:
    header = SWFHeader()
    header.add("Version", 2.2)
    header.add("MaxProcs", 64)
    header.add("Note", "first line\nsecond line")
    record = SWFRecord(
        1, 0.0, 12.0, 3600.5, 16, -1.0, -1.0, 16, 7200.0, -1.0, 1, 3, 1, -1, 2, 1, -1, -1.0
    )
    count = write_swf(tmp_path / "out.swf", [record], header)

    assert count == 1
    assert (tmp_path / "out.swf").read_text() == (
        "; Version: 2.2\n"
        "; MaxProcs: 64\n"
        "; Note: first line\n"
        ";       second line\n"
        "1 0 12 3600.5 16 -1 -1 16 7200 -1 1 3 1 -1 2 1 -1 -1\n"
    )


def test_header_round_trip_through_a_file(tmp_path: Path) -> None:
    original = read_swf(SMALL)
    write_swf(tmp_path / "copy.swf", original)
    copy = read_swf(tmp_path / "copy.swf")

    assert copy.header.entries == original.header.entries
    assert list(copy.records()) == list(original.records())
    assert copy.header.lines() == original.header.lines()


def test_gzip_is_written_when_the_name_ends_in_gz(tmp_path: Path) -> None:
    write_swf(tmp_path / "copy.swf.gz", read_swf(SMALL, rules=RAW))

    assert (tmp_path / "copy.swf.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert list(read_swf(tmp_path / "copy.swf.gz", rules=RAW).records()) == list(
        read_swf(SMALL, rules=RAW).records()
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("allocated_processors", 2.5, "allocated_processors=2.5 cannot be written"),
        ("run_time", math.nan, "run_time=nan cannot be written"),
        ("submit_time", math.inf, "submit_time=inf cannot be written"),
        ("job_number", 2**63, f"job_number={2**63} cannot be written"),
        ("job_number", 1e19, r"job_number=1e\+19 cannot be written"),
    ],
)
def test_writer_refuses_values_swf_cannot_hold(
    tmp_path: Path, field: str, value: float, message: str
) -> None:
    record = SWFRecord._make(value if name == field else 1 for name in FIELDS)

    with pytest.raises(ValueError, match=message):
        write_swf(tmp_path / "out.swf", [record])


def test_writer_refuses_records_of_the_wrong_length(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a job line has 18 fields, this record has 17"):
        write_swf(tmp_path / "out.swf", [tuple([1] * 17)])  # type: ignore[list-item]


ids = st.one_of(st.just(-1), st.integers(0, 2**40))
times = st.one_of(
    st.just(-1.0),
    st.integers(0, 2**40).map(float),
    st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False),
)
records = st.builds(SWFRecord, *[ids if f in INT_FIELDS else times for f in FIELDS])
texts = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=30
)
keys = st.sampled_from(["Version", "MaxProcs", "Note", "Queue", "Computer", "MyKey"])
entries = st.lists(st.tuples(keys, texts.map(str.strip)), max_size=8)
slow = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@slow
@given(jobs=st.lists(records, max_size=40), gz=st.booleans(), force_slow_path=st.booleans())
def test_random_records_round_trip(jobs: list[SWFRecord], gz: bool, force_slow_path: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("trace.swf.gz" if gz else "trace.swf")
        assert write_swf(path, jobs) == len(jobs)
        if force_slow_path:  # one bad line sends the whole block down the line-by-line parser
            with gzip.open(path, "at") if gz else path.open("a") as out:
                out.write("not a job\n")
        trace = read_swf(path, rules=RAW, on_error="skip")

    assert list(trace.records()) == jobs
    assert trace.report.malformed_lines == int(force_slow_path)
    for record in trace.records():
        assert [type(v) for v in record] == [int if f in INT_FIELDS else float for f in FIELDS]


@slow
@given(entries=entries)
def test_random_headers_round_trip(entries: list[tuple[str, str]]) -> None:
    header = SWFHeader(entries)
    with tempfile.TemporaryDirectory() as tmp:
        write_swf(Path(tmp) / "h.swf", [], header)
        assert read_swf(Path(tmp) / "h.swf").header.entries == header.entries


# -- scale ----------------------------------------------------------------------------


def test_synthetic_200000_line_trace_parses_exactly(tmp_path: Path) -> None:
    n = 200_000
    rng = np.random.default_rng(7)
    submit = np.cumsum(rng.integers(0, 120, n)) + rng.integers(0, 2, n) * 0.5
    run = rng.integers(1, 86_400, n) + rng.integers(0, 4, n) * 0.25
    procs = 2 ** rng.integers(0, 10, n)
    requested = run * 2 + 60
    users = rng.integers(1, 500, n)
    columns = zip(
        submit.tolist(),
        run.tolist(),
        procs.tolist(),
        requested.tolist(),
        users.tolist(),
        strict=True,
    )
    text = "; Version: 2.2\n; MaxProcs: 1024\n" + "".join(
        f"{i:7d} {s:10} 0 {r:9} {p:5d} -1 -1 {p:5d} {q} -1 1 {u:3d} 1 -1 1 -1 -1 -1\n"
        for i, (s, r, p, q, u) in enumerate(columns, 1)
    )
    path = write_text(tmp_path / "big.swf", text)
    trace = read_swf(path)

    assert len(trace) == n
    assert trace.report == CleaningReport(records_read=n, kept=n)
    np.testing.assert_array_equal(trace.job_number, np.arange(1, n + 1))
    np.testing.assert_array_equal(trace.submit_time, submit)
    np.testing.assert_array_equal(trace.run_time, run)
    np.testing.assert_array_equal(trace.allocated_processors, procs)
    np.testing.assert_array_equal(trace.requested_time, requested)
    np.testing.assert_array_equal(trace.user_id, users)
    assert (trace.think_time == -1).all()
    gz = tmp_path / "big.swf.gz"
    with path.open("rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)
    with SWFReader(gz) as reader:
        assert sum(1 for _ in reader) == n
