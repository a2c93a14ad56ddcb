#!/bin/bash
#SBATCH --frobnicate=yes
#SBATCH --time=1:00:00
python run.py
