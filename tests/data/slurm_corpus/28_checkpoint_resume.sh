#!/bin/bash
#SBATCH --job-name=resume
#SBATCH --time=00:01:00
#SBATCH --signal=B:SIGUSR1@45
#SBATCH --output=resume-%j.out
# expect: line CHECKPOINT-SAVED
CKPT=ckpt-$SLURM_JOB_ID.txt
on_usr1() { echo "step=$STEP" > "$CKPT"; echo "CHECKPOINT-SAVED $(cat "$CKPT")"; exit 0; }
trap on_usr1 USR1
STEP=0
while true; do STEP=$((STEP + 1)); sleep 1; done
