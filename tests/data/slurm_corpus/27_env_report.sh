#!/bin/bash
#SBATCH --job-name=env-report
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --time=5
#SBATCH --output=env-%j.out
# expect: hosts 2
# expect: line NNODES 2
# expect: line NTASKS 8
echo "HOSTS $(scontrol show hostnames | tr '\n' ' ')"
echo "NNODES $SLURM_JOB_NUM_NODES"
echo "NTASKS $SLURM_NTASKS"
echo "TASKS_PER_NODE $SLURM_TASKS_PER_NODE"
