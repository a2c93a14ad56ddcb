#!/bin/sh
#SBATCH --job-name="nightly eval"   # a name with a space
#SBATCH --comment='nightly regression run'
#SBATCH --export=DATASET=imagenet,MODE=fast
#SBATCH --chdir=results
#SBATCH --time=30:00
#SBATCH --mem=8G
#SBATCH --cpus-per-task=2

echo "evaluating $DATASET in $MODE mode from $(pwd)"
