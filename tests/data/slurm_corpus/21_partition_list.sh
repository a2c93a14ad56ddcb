#!/bin/bash
#SBATCH -p gpu_a100,batch
#SBATCH --gres=gpu:2
#SBATCH -t 15
#SBATCH -o part-list-%j.out
# expect: warning partition
# expect: gpus 2
python3 -c 'import os; print("GPUS", len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")))'
