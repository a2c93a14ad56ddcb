#!/bin/bash
#SBATCH -J quick -N1 -n4 -c2 -t5 -q low -p default
#SBATCH --mem 16G
#SBATCH -G a100:4
#SBATCH --job-name=quick-final
echo "later directives win: the name is quick-final"
