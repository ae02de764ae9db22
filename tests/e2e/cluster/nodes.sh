# A test cluster's env file and node names, which cluster.sh (cluster.env, node1..) and
# tests/e2e/slurm/slurm_cluster.sh (slurm.env, n1..) keep alike (sourced by both); the
# errors go through the caller's die().

# source_env DIR FILE WHAT: the variables of DIR/FILE, which a WHAT's set-up wrote
source_env() {
    [[ -f $1/$2 ]] || die "no $3 in '$1' (missing $2)"
    # shellcheck disable=SC1090
    source "$1/$2"
}

# index_of PREFIX NAME RANGE: the index (1..$NODES) of the node named PREFIXi or i; an
# error shows RANGE, the names there are
index_of() {
    local n=${2#"$1"}
    [[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= NODES )) || die "no node '$2' ($3)"
    echo "$n"
}
