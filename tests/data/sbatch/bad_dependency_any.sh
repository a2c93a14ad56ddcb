#!/bin/bash
#SBATCH --job-name=nightly
#SBATCH --dependency=afterok:prep-1?afterok:prep-2
./nightly.sh
