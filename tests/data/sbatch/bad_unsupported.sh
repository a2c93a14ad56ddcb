#!/bin/bash
#SBATCH --job-name=legacy
#SBATCH --exclusive
#SBATCH --nodes=1
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=someone@example.org
#SBATCH --constraint=skylake

./run.sh
