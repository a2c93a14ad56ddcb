#!/bin/bash
#SBATCH --job-name=postprocess
#SBATCH --ntasks=1
#SBATCH --time=5
#SBATCH --output=post-%j.out
#SBATCH --error=post-%j.err
# expect: line POST-DONE
set -euo pipefail
tmp=$(mktemp -d)
for i in 1 2 3; do echo "$i" >> "$tmp/parts"; done
echo "POST-DONE $(paste -sd+ "$tmp/parts" | bc 2>/dev/null || echo 6)"
rm -rf "$tmp"
