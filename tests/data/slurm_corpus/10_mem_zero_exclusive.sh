#!/bin/bash
#SBATCH --job-name=whole-node
#SBATCH --nodes=1
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --ntasks-per-node=2
#SBATCH --time=10:00
#SBATCH --output=whole-%j.out
# expect: step 0 tasks=2 nodes=1
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
