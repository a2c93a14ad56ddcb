"""Resource strings: what people write, what Horizon understands, and the errors for the rest."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.resources import (
    GpuModel,
    ResourceError,
    format_memory,
    parse_count,
    parse_cpus,
    parse_duration,
    parse_gpu_model,
    parse_memory,
)

GI = 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8g", 8 * GI),
        ("8G", 8 * GI),  # Slurm: single letters are binary
        ("16Gi", 16 * GI),
        ("512m", 512 * 1024**2),
        ("512Mi", 512 * 1024**2),
        ("1.5k", 1536),
        ("16GB", 16 * 10**9),
        ("1024", 1024),
        (1024, 1024),
        ("2T", 2 * 1024**4),
        (" 4 gi ", 4 * GI),
    ],
)
def test_memory_forms(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [(2.5, 2500), ("2.5", 2500), ("500m", 500), (2, 2000), ("4", 4000), (0.0001, 1)],
)
def test_cpu_forms(text, expected):
    assert parse_cpus(text) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [("lots", "is not a memory size"), ("-1", "is negative"), ("8Q", "unknown unit 'Q'"), ("", "is not a memory size"),
     (-5, "is negative"), (True, "boolean"), ("0.5", "fractional number of bytes"), (float("nan"), "finite")],
)
def test_bad_memory_names_field_and_forms(value, problem):
    with pytest.raises(ResourceError) as info:
        parse_memory(value, "resources.memory")
    message = str(info.value)
    assert message.startswith("resources.memory: ")
    assert problem in message
    assert "16Gi" in message and "8g" in message  # the accepted forms are listed


@pytest.mark.parametrize("value", ["lots", "-1", "8Q", "2 cores", -1, None])
def test_bad_cpus(value):
    with pytest.raises(ResourceError) as info:
        parse_cpus(value, "resources.cpus")
    assert "resources.cpus" in str(info.value) and "500m" in str(info.value)


def test_gpu_models():
    assert parse_gpu_model("a100") == GpuModel("a100", None)
    assert parse_gpu_model("H100-80GB") == GpuModel("h100", "80gb")
    assert str(parse_gpu_model("h100-80gb")) == "h100-80gb"
    for bad in ["", "a100 80gb", "a100/80", "-x", 7]:
        with pytest.raises(ResourceError) as info:
            parse_gpu_model(bad, "resources.gpu_type")
        assert "h100-80gb" in str(info.value)


def test_counts():
    assert parse_count(3, "resources.gpus") == 3
    with pytest.raises(ResourceError, match="resources.gpus: -1 is negative"):
        parse_count(-1, "resources.gpus")
    with pytest.raises(ResourceError, match="not a whole number"):
        parse_count(1.5, "nodes")
    with pytest.raises(ResourceError, match="below the minimum of 1"):
        parse_count(0, "nodes", minimum=1)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(90, 90.0), ("10m", 600.0), ("2h", 7200.0), ("1d", 86400.0), ("1-02:00:00", 93600.0),
     ("02:30:00", 9000.0), ("90:00", 5400.0), ("30s", 30.0)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration():
    with pytest.raises(ResourceError, match="time_limit: 'soon' is not a duration"):
        parse_duration("soon")


@given(st.integers(min_value=0, max_value=2**50))
def test_memory_format_round_trips(n):
    assert parse_memory(format_memory(n)) == n or "." in format_memory(n)
