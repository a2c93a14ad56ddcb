#!/bin/bash
#SBATCH --ntasks-per-node=3
#SBATCH --gres=gpu:4
#SBATCH --time=UNLIMITED
python run.py
