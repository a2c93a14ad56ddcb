#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-3
#SBATCH --cpus-per-task=2
#SBATCH --mem-per-cpu=2G
#SBATCH --time=0-0:10
#SBATCH --output=sweep_%A_%a.out
# expect: array 4
LRS=(0.1 0.01 0.001 0.0001)
echo "ARRAY $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID lr=${LRS[$SLURM_ARRAY_TASK_ID]}"
