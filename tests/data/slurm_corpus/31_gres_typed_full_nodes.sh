#!/bin/bash
#SBATCH -N2 --ntasks-per-node=4 --gres=gpu:A100:4
#SBATCH --time=14-0
#SBATCH --output=full-%j.out
# expect: step 0 tasks=8 nodes=2 gpus=4
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
