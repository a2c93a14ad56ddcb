#!/bin/bash
#SBATCH --job-name=four-on-one
#SBATCH --ntasks=4
#SBATCH --gres=gpu:1
#SBATCH --time=5
#SBATCH --output=shared-%j.out
# expect: step 0 tasks=4 nodes=1 gpus=1
# Four tasks share one GPU (small inference workers).
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
