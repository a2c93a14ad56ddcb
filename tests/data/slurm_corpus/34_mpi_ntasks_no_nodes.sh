#!/bin/bash
#SBATCH --job-name=wrf-hybrid
#SBATCH --ntasks=12
#SBATCH --cpus-per-task=8
#SBATCH --mem-per-cpu=1G
#SBATCH --time=00:20:00
#SBATCH --output=wrf-%j.out
# expect: step 0 tasks=12 nodes=2
# Hybrid MPI/OpenMP with no --nodes (issue 34): 96 CPUs do not fit one 64-CPU node, so submission
# spreads the ranks over two nodes of 6, as Slurm gives as many nodes as the tasks need.
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
srun bash -c 'echo TASK $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $SLURM_NTASKS ${CUDA_VISIBLE_DEVICES:--}'
