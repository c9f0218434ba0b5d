# Sourced by every script here: where the test Slurm keeps its files.
# Override any of them in the environment (the same values must reach
# power.sh, which slurmctld runs: start.sh writes them into slurm.conf).
ELASTICSITE_SLURM_DIR=${ELASTICSITE_SLURM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
RUN_DIR=${ELASTICSITE_SLURM_RUN_DIR:-/run/elasticsite-slurm}
STATE_DIR=${ELASTICSITE_SLURM_STATE_DIR:-/var/lib/elasticsite-slurm}
LOG_DIR=${ELASTICSITE_SLURM_LOG_DIR:-/var/log/elasticsite-slurm}
SLURM_CONF_FILE=${SLURM_CONF:-/etc/slurm/slurm.conf}
# first line of every slurm.conf start.sh writes: it never overwrites a file without it
CONF_MARK="# written by elasticsite scripts/slurm/start.sh"
