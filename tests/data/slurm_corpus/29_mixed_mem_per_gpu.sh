#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --gres=gpu:2
#SBATCH --mem-per-gpu=20G
#SBATCH --cpus-per-gpu=4
#SBATCH --time=5
#SBATCH --output=mpg-%j.out
# expect: step 0 tasks=2 nodes=1 gpus=2
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
