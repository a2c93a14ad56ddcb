#!/bin/bash
#SBATCH --job-name=quick
#SBATCH --ntasks=1
#SBATCH --time=0:05
#SBATCH --output=quick-%j.out
# expect: line SLEPT
# 0:05 is minutes:seconds, five seconds, which Slurm makes a whole minute (issue 34): a job of
# ten seconds ends well.
sleep 8
echo SLEPT
