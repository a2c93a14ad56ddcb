#!/bin/bash
#SBATCH --job-name=mem-gb
#SBATCH --mem=16GB
#SBATCH --time=0:5:0
#SBATCH --output=mem-gb-%j.out
# expect: line MEM-OK
echo "MEM-OK $SLURM_MEM_PER_NODE"
