#!/bin/bash
#SBATCH --job-name=cfd
#SBATCH -N 2
#SBATCH -n 64
#SBATCH --mem-per-cpu=2000
#SBATCH -t 08:00:00
#SBATCH -A hpc
#SBATCH --open-mode=append
#SBATCH --output=cfd.log

module load openmpi
mpirun ./simulate input.cfg
