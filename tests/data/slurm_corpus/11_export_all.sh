#!/bin/bash
#SBATCH --export=ALL
#SBATCH --ntasks=2
#SBATCH --time=5
#SBATCH --output=export-%j.out
# expect: step 1 tasks=2 nodes=1
# expect: line FROM-BATCH yes
export FROM_BATCH=yes
srun bash -c 'echo FROM-BATCH $FROM_BATCH'
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
