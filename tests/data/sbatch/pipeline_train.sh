#!/bin/bash
#SBATCH --job-name=train
#SBATCH --dependency=afterok:prep-001
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=16
#SBATCH --mem=128G
#SBATCH --time=1-00:00:00

python train.py --data shards/ --epochs 10
