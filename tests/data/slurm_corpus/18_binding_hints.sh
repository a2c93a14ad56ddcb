#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --gpus-per-task=1
#SBATCH --gpu-bind=closest
#SBATCH --hint=nomultithread
#SBATCH --distribution=block:cyclic
#SBATCH --tmp=10G
#SBATCH --time=10
#SBATCH --output=hints-%j.out
# expect: step 0 tasks=2 nodes=1 gpus=1 distinct
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
