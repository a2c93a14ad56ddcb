#!/bin/bash
#SBATCH --job-name=ddp-llm
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:A100:4
#SBATCH --cpus-per-task=8
#SBATCH --time=1-00:00:00
#SBATCH --output=logs/%x_%j.out
# expect: step 0 tasks=8 nodes=2 gpus=4
# expect: hosts 2
# expect: line MASTER
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=29500
echo "HOSTS $(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr '\n' ' ')"
echo "MASTER $MASTER_ADDR:$MASTER_PORT"
srun python3 -c 'import os; e = os.environ; print("TASK", e["SLURM_STEP_ID"], e["SLURM_PROCID"], e["SLURM_LOCALID"], e["SLURM_NODEID"], e["SLURMD_NODENAME"], e["SLURM_NTASKS"], e.get("CUDA_VISIBLE_DEVICES") or "-", flush=True)'
