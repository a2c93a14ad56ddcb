#!/bin/bash
#SBATCH --job-name=resnet50
#SBATCH --partition=gpu
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=02:00:00
#SBATCH --output=%x-%j.out
# expect: gpus 1
module purge 2>/dev/null || true
echo "training on $CUDA_VISIBLE_DEVICES with $SLURM_CPUS_PER_TASK cpus"
python3 - <<'EOF'
import os
devices = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
assert len(devices) == 1, devices
print("GPUS", len(devices))
EOF
