#!/bin/bash
#SBATCH --job-name=prep
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=16
#SBATCH --mem=64000
#SBATCH --time=45:00

python preprocess.py --in raw/ --out shards/
