#!/bin/bash
# 16 GPUs in all: 2 nodes x 8 tasks, one GPU each.
#SBATCH --job-name=megatron
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus=16
#SBATCH --cpus-per-task=6
#SBATCH --mem=400G
#SBATCH --time=7-00:00:00
python pretrain_gpt.py --tensor-model-parallel-size 8
