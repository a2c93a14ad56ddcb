#!/bin/bash
#SBATCH --nodes=2
#SBATCH --tasks-per-node=3
#SBATCH --time=00:05:00
#SBATCH --output=tpn-%j.out
# expect: step 0 tasks=6 nodes=2
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
