#!/bin/bash
#SBATCH -J mpi_hello
#SBATCH -N 2
#SBATCH -n 8
#SBATCH -t 30
#SBATCH -o mpi_hello.%j.out
# expect: step 0 tasks=8 nodes=2
# MPI programs are started by srun, one rank per task
srun --mpi=pmix bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
