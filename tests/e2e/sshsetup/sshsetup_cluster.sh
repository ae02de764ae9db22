#!/usr/bin/env bash
# Cluster tier: `dslaunch ssh-setup --mesh` against password-only sshds (run under
# with_cluster.sh 3; needs root for useradd/chpasswd, as CI has).
# usage: with_cluster.sh 3 sshsetup_cluster.sh DSLAUNCH SOURCE_DIR
#
# The test turns the cluster's key-only sshds into "fresh nodes": each node's
# sshd_config (in the cluster directory) is rewritten to accept a password, to read
# keys from the user's own ~/.ssh/authorized_keys with StrictModes on, and to offer
# SFTP; then each sshd is restarted. A test user with a known password is created
# (and removed at the end, also on failure), and a second user whose password differs
# stands in for "a wrong password on one host".
#
# Namespace nodes share one filesystem: /etc/passwd and /home are the same for every
# node, so the test user's authorized_keys, known_hosts and config are ONE file seen by
# all nodes. The test therefore checks content and idempotence (each key once, files
# byte for byte unchanged by a second run), and that every direction really works
# (BatchMode ssh from this host and from each node to each other), not per-node copies.
# Node names resolve through the user's ~/.ssh/config here (HostName/Port written by
# the test); on a real cluster DNS does that.
set -u
DSL=$1
SRC=$2
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"
cd "$T_TMP"

U=dslss$$
U2=dslsx$$
PW="pw-$$-ok 'quote"
PW2="other-$$"
HOMEU=/home/$U
KEY=$T_TMP/id_dslaunch
BIN=$(mktemp -d /tmp/dslss-bin.XXXXXX) && chmod 755 "$BIN"

cleanup() {
    userdel -r -f "$U" >/dev/null 2>&1 || true
    userdel -r -f "$U2" >/dev/null 2>&1 || true
    rm -rf "$T_TMP" "$BIN"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP needs root (useradd)"; exit 0; }
useradd -m -s /bin/bash "$U" || exit 1
useradd -m -s /bin/bash "$U2" || exit 1
printf '%s:%s\n%s:%s\n' "$U" "$PW" "$U2" "$PW2" | chpasswd || exit 1

# password-only sshds (a key works once it is in the user's own authorized_keys)
for i in $(seq 1 "$NODES"); do
    cfg=$D/node$i/sshd_config
    sed -i -e 's/^PasswordAuthentication .*/PasswordAuthentication yes/' \
        -e 's|^AuthorizedKeysFile .*|AuthorizedKeysFile .ssh/authorized_keys|' \
        -e 's/^StrictModes .*/StrictModes yes/' "$cfg"
    grep -q "^Subsystem sftp" "$cfg" || echo "Subsystem sftp internal-sftp" >>"$cfg"
    "$CL" sshd-stop "$D" "$i" && "$CL" sshd-start "$D" "$i" || exit 1
done

# the launcher's view: user U on every node; known_hosts starts empty
for i in $(seq 1 "$NODES"); do
    a=ADDR_$i p=PORT_$i
    printf 'Host node%s\n  HostName %s\n  Port %s\n  User %s\n  UserKnownHostsFile %s\n  GlobalKnownHostsFile /dev/null\n\n' \
        "$i" "${!a}" "${!p}" "$U" "$T_TMP/known_hosts"
done >"$T_TMP/ssh_config"
# node 3 as the second user: the same password is wrong there
awk -v u="$U" -v u2="$U2" '/^Host /{h=$2} /^  User /{ if (h=="node3") $0="  User " u2; else $0="  User " u} {print}' \
    "$T_TMP/ssh_config" >"$T_TMP/ssh_config_wrong"
: >"$T_TMP/known_hosts"
# the nodes' view (name resolution only), and a ~/.ssh that sshd would refuse
mkdir -p "$HOMEU/.ssh"
for i in $(seq 1 "$NODES"); do
    a=ADDR_$i p=PORT_$i
    printf 'Host node%s\n  HostName %s\n  Port %s\n  ConnectTimeout 10\n\n' "$i" "${!a}" "${!p}"
done >"$HOMEU/.ssh/config"
chown -R "$U:$U" "$HOMEU/.ssh"
chmod 0777 "$HOMEU/.ssh"
chmod 0644 "$HOMEU/.ssh/config"

SETUP=("$DSL" ssh-setup --mesh --hostfile "$D/hostfile" --ssh-config "$T_TMP/ssh_config"
       --key "$KEY")
batch() { # from this host, with the new key only
    ssh -F "$T_TMP/ssh_config" -i "$KEY" -o IdentitiesOnly=yes -o BatchMode=yes \
        -o StrictHostKeyChecking=yes "$@"
}
as_user_on() { # node cmd...: run as U inside the node's namespace
    local n=$1; shift
    "$CL" exec "$D" "$n" runuser -u "$U" -- "$@"
}
# rows_ok I...: ssh-setup's table (in out) shows nodeI, for each I, done with every step
# and its key installed once
rows_ok() {
    local i
    for i in "$@"; do
        grep -E "^node$i +yes +yes \(present\) +yes \(known\) +ok 1/1\$" out || fail "row of node$i"
    done
}
count_key() { grep -cF "$(cut -d' ' -f2 "$KEY.pub")" "$1"; }
digest() { sha256sum "$HOMEU/.ssh/authorized_keys" "$HOMEU/.ssh/known_hosts" \
    "$HOMEU/.ssh/config" "$HOMEU/.ssh/id_dslaunch" "$HOMEU/.ssh/id_dslaunch.pub" \
    "$T_TMP/known_hosts"; }

expect_success "the fresh nodes take no key: BatchMode ssh fails" '
    ssh-keygen -q -t ed25519 -N "" -f "$T_TMP/other_key"
    ! ssh -F "$T_TMP/ssh_config" -i "$T_TMP/other_key" -o BatchMode=yes \
        -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null node1 true 2>/dev/null
'

expect_success "without a terminal and without --yes an unknown host key is refused" '
    run_capture rc out err setsid -w "${SETUP[@]}" --password-fd 3 3<<<"$PW" </dev/null
    assert_eq "$rc" 1 "exit code"
    assert_grep "no terminal to confirm it" out
    assert_grep "SHA256:" out
    [ ! -s "$T_TMP/known_hosts" ] || fail "known_hosts written without consent: $(cat "$T_TMP/known_hosts")"
'

expect_success "ssh-setup --mesh with the password makes every direction passwordless" '
    run_capture rc out err setsid -w "${SETUP[@]}" --yes --password-fd 3 3<<<"$PW" </dev/null
    cat out err
    assert_eq "$rc" 0 "exit code"
    [ -s "$KEY" ] && [ -s "$KEY.pub" ] || fail "no key pair"
    assert_eq "$(stat -c %a "$KEY")" 600 "private key mode"
    for i in $(seq 1 "$NODES"); do
        grep -E "^node$i +yes +yes \((added|present)\) +yes \(new\) +ok $((NODES - 1))/$((NODES - 1))\$" out \
            || fail "row of node$i"
    done
    assert_grep "yes (added)" out
    assert_grep "node1: fixed: ~/.ssh: group/other-writable, so sshd ignores the authorized_keys in it; mode 0777 -> 0700" out
    assert_eq "$(stat -c %a "$HOMEU/.ssh")" 700 "~/.ssh mode"
    assert_eq "$(stat -c %a "$HOMEU/.ssh/authorized_keys")" 600 "authorized_keys mode"
    assert_eq "$(stat -c %a "$HOMEU/.ssh/id_dslaunch")" 600 "remote private key mode"
    assert_eq "$(stat -c %U "$HOMEU/.ssh/authorized_keys")" "$U" "authorized_keys owner"
    assert_eq "$(count_key "$HOMEU/.ssh/authorized_keys")" 1 "key lines"
    cmp "$KEY" "$HOMEU/.ssh/id_dslaunch"
    assert_eq "$(grep -c . "$HOMEU/.ssh/known_hosts")" "$NODES" "known_hosts lines"
    assert_eq "$(grep -c . "$T_TMP/known_hosts")" "$NODES" "local known_hosts lines"
    assert_grep "IdentityFile ~/.ssh/id_dslaunch" "$HOMEU/.ssh/config"
    for i in $(seq 1 "$NODES"); do
        batch "node$i" true || fail "launcher -> node$i"
        for j in $(seq 1 "$NODES"); do
            [ "$i" = "$j" ] && continue
            got=$(as_user_on "node$i" ssh -o BatchMode=yes -o StrictHostKeyChecking=yes \
                  "node$j" hostname </dev/null) || fail "node$i -> node$j"
            [ "$MODE" != netns ] || assert_eq "$got" "node$j" "hostname seen from node$i"
        done
    done
'

expect_success "a second run changes nothing and needs no password" '
    digest >before
    run_capture rc out err setsid -w "${SETUP[@]}" </dev/null
    cat out err
    assert_eq "$rc" 0 "exit code"
    digest >after
    cmp before after || fail "files changed: $(diff before after)"
    for i in $(seq 1 "$NODES"); do
        grep -E "^node$i +yes +yes \(present\) +yes \(known\) +ok " out || fail "row of node$i"
    done
    assert_not_grep "fixed:" out
    assert_eq "$(count_key "$HOMEU/.ssh/authorized_keys")" 1 "key lines"
'

expect_success "on a terminal: each host key confirmed, the password asked once, never echoed" '
    sed "s|$T_TMP/known_hosts\$|$T_TMP/known_hosts_tty|" "$T_TMP/ssh_config" >"$T_TMP/ssh_config_tty"
    run_capture rc out err python3 "$SRC/tests/e2e/sshsetup/tty_drive.py" "$PW" "$DSL" ssh-setup \
        --hostfile "$D/hostfile" --ssh-config "$T_TMP/ssh_config_tty" --key "$T_TMP/tty_key"
    cat out err
    assert_eq "$rc" 0 "exit code"
    assert_eq "$(grep -c "SSH password" out)" 1 "password prompts"
    assert_eq "$(grep -c "\[y/N\]" out)" "$NODES" "host key questions"
    assert_not_grep "$PW" out
    assert_eq "$(grep -c . "$T_TMP/known_hosts_tty")" "$NODES" "recorded host keys"
    assert_eq "$(grep -cF "$(cut -d" " -f2 "$T_TMP/tty_key.pub")" "$HOMEU/.ssh/authorized_keys")" 1 "key lines"
    assert_eq "$(count_key "$HOMEU/.ssh/authorized_keys")" 1 "first key lines"
'

expect_success "a wrong password fails on that host only" '
    # the password from the environment this time (documented for automation)
    run_capture rc out err env DSLAUNCH_SSH_PASSWORD="$PW" setsid -w "$DSL" ssh-setup --mesh \
        --hostfile "$D/hostfile" --ssh-config "$T_TMP/ssh_config_wrong" --key "$KEY" </dev/null
    cat out err
    assert_eq "$rc" 1 "exit code"
    grep -E "^node3 +NO " out || fail "node3 row"
    assert_grep "node3: error: permission denied for .node3.: wrong password" out
    rows_ok 1 2
    [ ! -e "/home/$U2/.ssh/authorized_keys" ] || fail "key installed for the wrong user"
'

expect_success "a changed host key fails that host only, and is neither replaced nor passed on" '
    # node2 "reinstalled": a new host key, unknown to everyone
    hk=$D/node2/ssh_host_ed25519_key
    cp -p "$hk" hk_saved
    ssh-keygen -q -t ed25519 -N "" -C node2-new -f newkey
    cp -p newkey "$hk"
    "$CL" sshd-stop "$D" 2 && "$CL" sshd-start "$D" 2
    cp "$T_TMP/known_hosts" kh_before
    sha256sum "$HOMEU/.ssh/known_hosts" >nodes_kh_before
    run_capture rc out err setsid -w "${SETUP[@]}" --yes </dev/null
    cp -p hk_saved "$hk"
    "$CL" sshd-stop "$D" 2 && "$CL" sshd-start "$D" 2
    cat out err
    assert_eq "$rc" 1 "exit code"
    grep -E "^node2 +- +- +FAILED +- *\$" out || fail "node2 row"
    assert_grep "node2: error: host key of .node2. has CHANGED" out
    rows_ok 1 3
    cmp "$T_TMP/known_hosts" kh_before || fail "local known_hosts changed"
    sha256sum -c --quiet nodes_kh_before || fail "the new key reached the nodes known_hosts"
'

expect_success "--ssh_port: host keys recorded as [name]:port, checked on that port" '
    P2=$((22000 + $$ % 1000))
    for i in $(seq 1 "$NODES"); do
        echo "Port $P2" >>"$D/node$i/sshd_config"
        "$CL" sshd-stop "$D" "$i" && "$CL" sshd-start "$D" "$i"
    done
    sed "s|$T_TMP/known_hosts\$|$T_TMP/known_hosts_port|" "$T_TMP/ssh_config" >"$T_TMP/ssh_config_port"
    run_capture rc out err setsid -w "$DSL" ssh-setup --mesh --hostfile "$D/hostfile" \
        --ssh-config "$T_TMP/ssh_config_port" --key "$KEY" --ssh_port "$P2" --yes </dev/null
    cat out err
    assert_eq "$rc" 0 "exit code"
    for i in $(seq 1 "$NODES"); do
        a=ADDR_$i
        grep -qF "[node$i]:$P2,[${!a}]:$P2 ssh-ed25519 " "$T_TMP/known_hosts_port" || fail "local line of node$i"
        grep -qF "[node$i]:$P2,[${!a}]:$P2 ssh-ed25519 " "$HOMEU/.ssh/known_hosts" || fail "node line of node$i"
        grep -E "^node$i +yes +yes \(present\) +yes \(new\) +ok " out || fail "row of node$i"
        ssh -F "$T_TMP/ssh_config_port" -p "$P2" -i "$KEY" -o IdentitiesOnly=yes -o BatchMode=yes \
            -o StrictHostKeyChecking=yes "node$i" true || fail "launcher -> node$i port $P2"
    done
    assert_grep "  Port $P2" "$HOMEU/.ssh/config"
'

# The default key under $HOME (not the passwd home) and the IdentityFile block in the
# config the user names: a launch with that same --ssh-config then logs in with the key
# (it used to go to ~/.ssh/config, which --ssh-config replaces, and the launch was denied).
expect_success "without --key: ssh-setup --ssh-config F under HOME=H, then a launch with --ssh-config F logs in" '
    H=$T_TMP/home; mkdir -p "$H"
    sed "s|$T_TMP/known_hosts\$|$T_TMP/known_hosts_home|" "$T_TMP/ssh_config" >"$T_TMP/ssh_config_home"
    run_capture rc out err env HOME="$H" setsid -w "$DSL" ssh-setup --hostfile "$D/hostfile" \
        --ssh-config "$T_TMP/ssh_config_home" --yes --password-fd 3 3<<<"$PW" </dev/null
    cat out err
    assert_eq "$rc" 0 "exit code"
    [ -s "$H/.ssh/id_dslaunch" ] || fail "the default key is not under \$HOME"
    assert_grep "^  IdentityFile $H/.ssh/id_dslaunch\$" "$T_TMP/ssh_config_home"
    [ ! -e "$H/.ssh/config" ] || fail "wrote ~/.ssh/config although --ssh-config was given"
    # the agent runs as the user on every node: the binary and the cwd must be theirs to use
    cp "$DSL" "$BIN/dslaunch"
    cd "$BIN"
    run_capture rc out err env HOME="$H" "$BIN/dslaunch" --launcher ssh --hostfile "$D/hostfile" \
        --num-gpus 1 --ssh-config "$T_TMP/ssh_config_home" -- id -un
    cat out err
    assert_eq "$rc" 0 "exit code of the launch"
    assert_eq "$(grep -c "^\[node[0-9]*:rank [0-9]*\] $U\$" out)" "$NODES" "ranks that ran as $U"
'

echo "1..$T_N"
[ "$T_FAILED" = 0 ]
