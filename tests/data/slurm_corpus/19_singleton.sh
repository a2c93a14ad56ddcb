#!/bin/bash
#SBATCH --job-name=singleton-chain
#SBATCH --dependency=singleton
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --time=5
#SBATCH --output=singleton-%j.out
# expect: line SINGLETON
echo "SINGLETON $SLURM_JOB_ID"
