# Sourced by the restart tests (tests/e2e/train/restart.sh, tests/e2e/multinode/restart.sh;
# POSIX sh). write_victim FILE DSTRAIN CK COND [FIRST] writes the rank program FILE:
# it runs the shell text FIRST, then on the first attempt, on the rank where the shell
# test COND holds, runs DSTRAIN in the background until checkpoint directory CK has a
# "latest" and SIGKILLs itself with it; any other rank or attempt is DSTRAIN itself.
# Paths are written in because remote ranks see only the env contract.
write_victim() {
    cat >"$1" <<EOF
#!/bin/sh
${5:-}
if [ "\$DSLAUNCH_RESTART_COUNT" = 0 ] && $4; then
    "$2" "\$@" &
    pid=\$!
    while [ ! -e "$3/latest" ] && kill -0 \$pid 2>/dev/null; do sleep 0.01; done
    # the rank and its dstrain die in one kill (of the rank process group): killed one
    # at a time, a peer could see it vanish and fail, and the stop SIGTERM this rank,
    # in between, so that the summary named the peer
    kill -9 0
fi
exec "$2" "\$@"
EOF
    chmod +x "$1"
}
