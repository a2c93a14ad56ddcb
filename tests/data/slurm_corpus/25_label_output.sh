#!/bin/bash
#SBATCH -N 1
#SBATCH -n 3
#SBATCH -t 5
#SBATCH -o label-%j.out
# expect: step 1 tasks=3 nodes=1
# expect: line 0: LABELLED
srun -l echo LABELLED
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
