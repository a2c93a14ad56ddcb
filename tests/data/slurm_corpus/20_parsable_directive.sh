#!/bin/bash
#SBATCH --parsable
#SBATCH --job-name=quiet
#SBATCH --time=5
#SBATCH --output=parsable-%j.out
# expect: line PARSABLE-RAN
echo "PARSABLE-RAN"
