#!/bin/bash
#SBATCH --time=2:00:00
#SBATCH --time-min=30:00
#SBATCH --output=timemin-%j.out
# expect: line TIMEMIN-DONE
echo "TIMEMIN-DONE"
