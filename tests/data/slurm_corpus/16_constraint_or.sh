#!/bin/bash
#SBATCH -C "v100|a100|h100"
#SBATCH --gpus-per-node=1
#SBATCH -t 10
#SBATCH -o constraint-or-%j.out
# expect: gpus 1
python3 -c 'import os; print("GPUS", len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")))'
