#!/bin/bash
#SBATCH --partition=debug
#SBATCH --qos=normal
#SBATCH --time=2-12
#SBATCH --account=default
#SBATCH --output=debug-%j.out
# expect: warning partition
# expect: line DEBUG-RAN
echo "DEBUG-RAN $SLURM_JOB_PARTITION"
