#!/bin/bash
#SBATCH --job-name=tolerant
#SBATCH --ntasks=2
#SBATCH --time=5
#SBATCH --output=tolerant-%j.out
# expect: step 0 tasks=2 nodes=1
# expect: line STEP-1-FAILED 3
# expect: sacct 1 FAILED 3:0
# A step may fail without failing the job: the script decides.
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
srun bash -c 'exit 3' || echo "STEP-1-FAILED $?"
