#!/bin/bash
#SBATCH --nodes=4
#SBATCH --gpus=6
#SBATCH --time=UNLIMITED
python run.py
