#!/bin/bash
#SBATCH --job-name=llama-ft
#SBATCH --nodes=1
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=16
#SBATCH --time=0
#SBATCH --output=%x-%j.out
# expect: warning no time limit
# expect: gpus 2
# expect: line LIMITED yes
# --time=0 asks for no limit (issue 34): the job runs under the most its partition allows.
python3 - <<'PY'
import os
print("GPUS", len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")))
PY
scontrol show job "$SLURM_JOB_ID" | grep -q "TimeLimit=[0-9]" && echo "LIMITED yes"
