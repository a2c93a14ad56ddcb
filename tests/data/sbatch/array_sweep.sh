#!/bin/bash
#SBATCH -J lr-sweep
#SBATCH -a 0-15%4
#SBATCH -c 4
#SBATCH --mem-per-cpu=4G
#SBATCH --gpus-per-task=1
#SBATCH -t 90
#SBATCH -o sweep_%A_%a.out
#SBATCH -e sweep_%A_%a.err

# Hyperparameter sweep: one learning rate per array task.
LRS=(1e-5 2e-5 5e-5 1e-4 2e-4 5e-4 1e-3 2e-3 5e-3 1e-2 2e-2 5e-2 1e-1 2e-1 5e-1 1.0)
python train.py --lr "${LRS[$SLURM_ARRAY_TASK_ID]}" --seed "$SLURM_ARRAY_TASK_ID"
