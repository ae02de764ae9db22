#!/bin/sh
# Start N ranks of a program on this host with the dslaunch env contract (a stand-in
# for `dslaunch --include localhost:0,...`): run_ranks.sh N program [args...]
# Exits non-zero if any rank does.
set -u
n=$1; shift
port=${MASTER_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
token=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
pids=""
r=0
while [ "$r" -lt "$n" ]; do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=$port DSLAUNCH_RUN_ID=run-$$ DSLAUNCH_RUN_TOKEN=$token "$@" &
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
exit $rc
