#!/bin/bash
#SBATCH --job-name=ckpt
#SBATCH --time=1
#SBATCH --signal=B:USR1@50
#SBATCH --open-mode=append
#SBATCH --output=ckpt-%j.out
# expect: line CHECKPOINT-SAVED
# The batch shell gets USR1 50 s before the 1-minute limit: save and leave cleanly.
checkpoint() {
    echo "CHECKPOINT-SAVED at $(date +%s)"
    kill "$trainer" 2>/dev/null
    exit 0
}
trap checkpoint USR1
echo "training..."
sleep 120 &
trainer=$!
wait
echo "never reached"
exit 1
