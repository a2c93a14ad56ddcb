#!/bin/bash
#SBATCH --job-name=legacy
#SBATCH --licenses=matlab:1|abaqus:1
#SBATCH --nodes=1
#SBATCH --mail-type=END,FAIL
#SBATCH --bb="capacity=10G"
#SBATCH --constraint=skylake*2

./run.sh
