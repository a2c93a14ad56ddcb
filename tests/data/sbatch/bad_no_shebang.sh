#SBATCH --job-name=forgot-the-shebang
python run.py
