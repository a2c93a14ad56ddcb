#!/bin/bash
#SBATCH --job-name=gromacs
#SBATCH -N 2
#SBATCH -n 5
#SBATCH -t 00:15:00
#SBATCH -o gmx-%j.out
# expect: step 0 tasks=5 nodes=2
# expect: line LAYOUT 5 3,2
# Five ranks on two nodes (issue 34): Slurm lays them out unevenly; Horizon runs 3 and 2.
echo "LAYOUT $SLURM_NTASKS $SLURM_TASKS_PER_NODE"
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
