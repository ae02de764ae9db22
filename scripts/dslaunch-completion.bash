# bash completion for dslaunch, dstrain and dsbench.
# The options come from the program's own --help at completion time, so they never
# fall behind the option table. Installed as share/bash-completion/completions/dslaunch.

_dslaunch_opts() { # PROGRAM [SUBCOMMAND]: every --long option its help lists
    "$@" --help 2>/dev/null | sed -n 's/^ *\(-[A-Za-z0-9], \)\{0,1\}\(--[A-Za-z0-9][-A-Za-z0-9_]*\).*/\2/p'
}

_dslaunch() {
    local cur prev prog=${COMP_WORDS[0]} sub= i
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
        doctor | sync | ssh-setup) [[ $prog == *dslaunch ]] && { sub=${COMP_WORDS[i]}; break; } ;;
        train) # the bundled trainer beside this dslaunch, as dslaunch itself finds it
            if [[ $prog == */dslaunch && -x ${prog%/*}/dstrain ]]; then prog=${prog%/*}/dstrain
            elif [[ $prog == *dslaunch ]]; then prog=dstrain; fi ;;
        -*) ;;
        *) # the first word that is not an option's value is the program: complete files
           case ${COMP_WORDS[i-1]} in
           -H | --hostfile | -i | --include | -e | --exclude | --launcher | --log-dir | \
           --master-addr | --master-port | --export | --config | --*=*) ;;
           *) [[ $prog == *dslaunch && -z $sub ]] && { COMPREPLY=($(compgen -f -- "$cur")); return; } ;;
           esac ;;
        esac
    done
    case $prev in
    -H | --hostfile | --config | --log-dir | --ssh-config | --ssh-identity | --metrics | \
    --save-params | --checkpoint-dir | --data-path)
        COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --launcher) COMPREPLY=($(compgen -W "auto local ssh pdsh openmpi slurm" -- "$cur")); return ;;
    --backend) COMPREPLY=($(compgen -W "tcp nccl auto" -- "$cur")); return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_dslaunch_opts "$prog" ${sub:+"$sub"})" -- "$cur"))
    elif [[ $prog == *dslaunch && -z $sub ]]; then
        COMPREPLY=($(compgen -W "train doctor sync ssh-setup" -- "$cur") $(compgen -c -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -F _dslaunch dslaunch dstrain dsbench
