#!/bin/bash
#SBATCH --tasks=4
#SBATCH --mem=8000MB
#SBATCH --time=5
#SBATCH --output=tasks-%j.out
# expect: step 0 tasks=4 nodes=1
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
