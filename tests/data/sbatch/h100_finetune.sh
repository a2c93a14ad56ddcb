#!/usr/bin/env bash
#SBATCH --job-name=sft-70b
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:h100-80gb:4
#SBATCH --cpus-per-gpu=8
#SBATCH --mem-per-gpu=100G
#SBATCH --time=2-12:00
#SBATCH --qos=high
#SBATCH --nice=10

# One process per GPU (the script starts them itself).
for rank in 0 1 2 3; do
    CUDA_VISIBLE_DEVICES=$rank RANK=$rank WORLD_SIZE=4 python finetune.py &
done
wait
