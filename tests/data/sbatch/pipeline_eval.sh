#!/bin/bash
#SBATCH --job-name=eval
#SBATCH --dependency=afterany:train-001,afterok:prep-001
#SBATCH --gpus=1
#SBATCH --time=0-02
#SBATCH --kill-on-invalid-dep=yes

python evaluate.py --checkpoint checkpoints/last.pt
