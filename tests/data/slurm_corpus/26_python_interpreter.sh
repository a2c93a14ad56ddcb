#!/usr/bin/env python3
#SBATCH --job-name=py-batch
#SBATCH --time=5
#SBATCH --output=py-%j.out
# expect: line PYTHON-BATCH
import os
print("PYTHON-BATCH", os.environ["SLURM_JOB_ID"], flush=True)
