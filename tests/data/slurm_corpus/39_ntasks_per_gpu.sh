#!/bin/bash
#SBATCH --job-name=infer
#SBATCH --nodes=1
#SBATCH --gres=gpu:2
#SBATCH --ntasks-per-gpu=1
#SBATCH --time=00:05:00
#SBATCH --output=infer-%j.out
# expect: step 0 tasks=2 nodes=1 gpus=1 distinct
# One rank per GPU (issue 34): each task its own GPU, as Slurm's --gpu-bind=single:1.
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
