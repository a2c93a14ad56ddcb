#!/bin/bash
#SBATCH --job-name=eval
#SBATCH --array=1-6:2%2
#SBATCH --ntasks=2
#SBATCH --time=10
#SBATCH --output=eval-%A-%a.out
# expect: array 3
# expect: step 0 tasks=2 nodes=1
echo "ARRAY $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID"
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
