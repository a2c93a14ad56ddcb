#!/bin/bash
#SBATCH --job-name=ddp-exclusive
#SBATCH --exclusive
#SBATCH --nodes=1
#SBATCH --gres=gpu:4
#SBATCH --time=00:10:00
#SBATCH --output=excl-%j.out
# expect: line ON-NODE 8 8
# --exclusive holds the whole node, all its GPUs (issue 34): the count and the devices agree.
echo "ON-NODE $SLURM_GPUS_ON_NODE $(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | wc -l)"
