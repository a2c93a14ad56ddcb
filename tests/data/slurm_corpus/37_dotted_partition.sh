#!/bin/bash
#SBATCH -N 1
#SBATCH -p test.q
#SBATCH -t 00:30:00
#SBATCH -J bwa-index
#SBATCH -o bwa-%j.out
# expect: warning 'test.q'
# expect: line INDEXED
# A site's queue name with a dot (issue 34): accepted; this cluster has no test.q, so it runs in the
# default partition with a warning.
echo "INDEXED on $SLURM_JOB_PARTITION"
