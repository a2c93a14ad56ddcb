#!/bin/bash
#SBATCH --nodes=2
#SBATCH --constraint=[a100]
#SBATCH --ntasks-per-node=1
#SBATCH --time=10
#SBATCH --output=constraint-br-%j.out
# expect: step 0 tasks=2 nodes=2
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
