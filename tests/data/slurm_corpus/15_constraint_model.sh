#!/bin/bash
#SBATCH --constraint=a100
#SBATCH --gpus=2
#SBATCH --time=10
#SBATCH --output=constraint-%j.out
# expect: gpus 2
python3 -c 'import os; print("GPUS", len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")))'
