#!/bin/bash
#SBATCH --job-name=nightly
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=someone@example.org
#SBATCH --requeue
#SBATCH --time=00:10:00
#SBATCH --output=nightly-%j.out
# expect: warning mail
# expect: line NIGHTLY-DONE
echo "NIGHTLY-DONE restarts=${SLURM_RESTART_COUNT:-0}"
