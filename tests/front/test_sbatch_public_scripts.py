"""The #SBATCH headers of public scripts that Horizon refused or ran otherwise than Slurm (issue 34,
"30 fresh #SBATCH scripts from public repositories"), each read as sbatch reads it: the script's own
directive lines, what the job asks for, and what Horizon says about it. Pure: ``parse_sbatch``.

What submission then makes of a job (the partition's MaxTime for no limit, the nodes tasks spread
over) is tested in tests/services/test_submission_slurm_shapes.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from services.front.slurm.sbatch import SbatchDefaults, parse_sbatch

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=timezone(timedelta(hours=1)))
DEFAULTS = SbatchDefaults(user="ann", workdir="/home/ann/run", script_path="/home/ann/run/job.sh", now=NOW)


def read(script: str) -> tuple[dict[str, Any], list[str]]:
    """The JobSubmitted fields of a whole script, and the warnings sbatch prints."""
    warnings: list[str] = []
    fields, _ = parse_sbatch(script.lstrip(), defaults=DEFAULTS, warnings=warnings)
    return fields, warnings


# ----------------------------------------------------------------------------- --time=0, whole minutes


def test_a_gpu_training_script_with_no_time_limit():
    fields, warnings = read("""
#!/bin/bash
#SBATCH --job-name=llama-ft
#SBATCH --nodes=1
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=32
#SBATCH --time=0
#SBATCH --output=logs/%x-%j.out
python train.py --config configs/ft.yaml
""")
    assert fields["time_limit_s"] == 0  # no limit: submission gives the partition's MaxTime
    assert warnings == ["line 6: --time: =0: no time limit: the job gets its partition's MaxTime, else the "
                        "cluster's longest limit (every Horizon job has one; backfill plans with it)"]


def test_unlimited_is_no_limit_too():
    fields, warnings = read("""
#!/bin/bash
#SBATCH -p long
#SBATCH -t UNLIMITED
#SBATCH --mem=16G
./simulate
""")
    assert fields["time_limit_s"] == 0 and fields["partitions"] == ["long"]
    assert "no time limit" in warnings[0]


def test_a_limit_in_seconds_is_whole_minutes_rounded_up():
    # minutes:seconds, as Slurm reads it: 0:05 is five seconds, which Slurm makes one minute
    fields, _ = read("""
#!/bin/bash
#SBATCH --time=0:05
#SBATCH --ntasks=1
hostname
""")
    assert fields["time_limit_s"] == 60
    fields, _ = read("#!/bin/bash\n#SBATCH --time=00:10:30\necho\n")  # hours:minutes:seconds
    assert fields["time_limit_s"] == 11 * 60


# ----------------------------------------------------------------------------- partition names with dots


def test_a_partition_named_with_a_dot():
    fields, warnings = read("""
#!/bin/bash
#SBATCH -N 1
#SBATCH -p test.q
#SBATCH -t 00:30:00
#SBATCH -J bwa-index
bwa index ref.fa
""")
    assert fields["partitions"] == ["test.q"] and warnings == []
    fields, _ = read("#!/bin/bash\n#SBATCH --partition=gpu.q,cpu.q\nhostname\n")
    assert fields["partitions"] == ["gpu.q", "cpu.q"]
