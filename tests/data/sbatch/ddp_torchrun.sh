#!/bin/bash
# Multi-node PyTorch DDP: 4 nodes x 8 A100s, one torchrun launcher per node.
#SBATCH --job-name=llama-ddp
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1          # one torchrun per node; it forks 8 workers
#SBATCH --gres=gpu:a100:8
#SBATCH --cpus-per-task=48
#SBATCH --mem=480G
#SBATCH --time=12:00:00
#SBATCH --partition=gpu
#SBATCH --account=ml
#SBATCH --output=logs/%x-%j.out

set -euo pipefail
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=29500
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK

srun torchrun \
    --nnodes="$SLURM_NNODES" \
    --nproc_per_node=8 \
    --rdzv_id="$SLURM_JOB_ID" \
    --rdzv_backend=c10d \
    --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" \
    train.py --config configs/llama-7b.yaml
