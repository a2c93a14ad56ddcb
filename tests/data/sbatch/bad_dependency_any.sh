#!/bin/bash
#SBATCH --job-name=nightly
#SBATCH --dependency=singleton
./nightly.sh
