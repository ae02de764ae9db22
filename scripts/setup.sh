#!/usr/bin/env bash
# Install the Debian packages dslaunch needs to build, test and benchmark.
# Idempotent: installs only what is missing, and does nothing (not even apt-get update)
# when everything is present. Run as root, or with sudo available.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git          # toolchain
  libssh-dev libssl-dev libcjson-dev libopenblas-dev zlib1g-dev   # libraries
  libdnnl-dev                                   # bf16 products on the CPU (oneDNN; optional)
  openssh-server openssh-client iproute2 procps # test cluster (network namespaces + sshd)
  iptables                                      # doctor test: a port blocked inside a node
  pdsh openmpi-bin libopenmpi-dev               # optional transports, peers
  slurmctld slurmd slurm-client munge          # Slurm test cluster (tests/e2e/slurm), srun ranks
  python3                                       # flow tests read the --dry-run JSON; the
                                                # security test captures with AF_PACKET
  dataset-fashion-mnist                         # the trainer's data set
  fortunes                                      # English text for the GPT (configs/gpt_fortunes.json)
  python3-regex                                 # GPT-2's encoder.py pattern, the BPE test's
                                                # reference (tests/e2e/train/bpe_ref.py)
  clang libclang-rt-14-dev                      # libFuzzer targets
  elfutils                                      # eu-stack: the hang detector's stack probes
  strace                                        # tests: which addresses a job binds
  python3-torch                                 # hang tests with PyTorch DDP programs (Gloo)
)
# The benchmarks compare with PyTorch (Gloo, DDP), rsync and pdcp: DSL_SETUP_EXTRA="rsync"
[ "${DSL_SETUP_EXTRA:-}" ] && PKGS+=($DSL_SETUP_EXTRA)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=
if [ "$(id -u)" != 0 ]; then
  SUDO=sudo
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
