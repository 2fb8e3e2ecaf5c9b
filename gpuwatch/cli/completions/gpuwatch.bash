# bash completion for gpuwatch (generated from gpuwatch's argument parser by gpuwatch/cli/completion.py: do not edit)
_gpuwatch() {
    local cur prev cmd="" i words
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            -*) ;;
            *) cmd="${COMP_WORDS[i]}"; break ;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        mapfile -t COMPREPLY < <(compgen -W "-h --help --version run status sensors restore fans-auto curve pause resume restart stop simulate-reset logs health receipt train check-config completion" -- "$cur")
        return
    fi
    case "$cmd" in
        run)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            words="-h --help -c --config --sysfs-root --proc-root --dry-run --simulate"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        status)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --watch) COMPREPLY=(); return ;;
                --color) mapfile -t COMPREPLY < <(compgen -W "auto always never" -- "$cur"); return ;;
                --gpu) mapfile -t COMPREPLY < <(compgen -W "$("${COMP_WORDS[0]}" completion --values gpus 2>/dev/null)" -- "$cur"); return ;;
                --remote) COMPREPLY=(); return ;;
                --timeout) COMPREPLY=(); return ;;
                --ca-file) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --user) COMPREPLY=(); return ;;
                --password-file) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --history) mapfile -t COMPREPLY < <(compgen -W "15m 1h 24h 7d" -- "$cur"); return ;;
            esac
            words="-h --help -c --config --sysfs-root --proc-root --json --watch --color --processes --gpu --remote --timeout --ca-file --user --password-file --history"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        sensors)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --watch) COMPREPLY=(); return ;;
                --color) mapfile -t COMPREPLY < <(compgen -W "auto always never" -- "$cur"); return ;;
                --gpu) mapfile -t COMPREPLY < <(compgen -W "$("${COMP_WORDS[0]}" completion --values gpus 2>/dev/null)" -- "$cur"); return ;;
            esac
            words="-h --help -c --config --sysfs-root --proc-root --json --watch --color --processes --gpu"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        restore)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            words="-h --help -c --config --sysfs-root --proc-root --force"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        fans-auto)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            words="-h --help -c --config --sysfs-root --proc-root --force"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        curve)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --gpu) mapfile -t COMPREPLY < <(compgen -W "$("${COMP_WORDS[0]}" completion --values gpus 2>/dev/null)" -- "$cur"); return ;;
            esac
            words="-h --help -c --config --sysfs-root --proc-root --gpu"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        pause)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            [[ "$cur" == -* ]] && words="-h --help -c --config" || words="$("${COMP_WORDS[0]}" completion --values runs 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        resume)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            [[ "$cur" == -* ]] && words="-h --help -c --config" || words="$("${COMP_WORDS[0]}" completion --values runs 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        restart)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            [[ "$cur" == -* ]] && words="-h --help -c --config" || words="$("${COMP_WORDS[0]}" completion --values runs 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        stop)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            [[ "$cur" == -* ]] && words="-h --help -c --config" || words="$("${COMP_WORDS[0]}" completion --values runs 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        simulate-reset)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            [[ "$cur" == -* ]] && words="-h --help -c --config" || words="$("${COMP_WORDS[0]}" completion --values gpus 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        logs)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                -n|--lines) COMPREPLY=(); return ;;
            esac
            [[ "$cur" == -* ]] && words="-h --help -c --config --sysfs-root --proc-root -n --lines -f --follow" || words="$("${COMP_WORDS[0]}" completion --values runs 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        health)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --format) mapfile -t COMPREPLY < <(compgen -W "nhc npd nagios json" -- "$cur"); return ;;
                --class) mapfile -t COMPREPLY < <(compgen -W "fan gpu pcie reset thermal" -- "$cur"); return ;;
            esac
            words="-h --help -c --config --sysfs-root --proc-root --format --class --slurm"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        receipt)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --sysfs-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --proc-root) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            words="-h --help -c --config --sysfs-root --proc-root --json"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        train)
            case "$prev" in
                --conv2d-fallback) mapfile -t COMPREPLY < <(compgen -W "auto on off" -- "$cur"); return ;;
                --conv2d-autotune) mapfile -t COMPREPLY < <(compgen -W "on off" -- "$cur"); return ;;
                --conv2d-tune-cache) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --heartbeat-file) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --pause-file) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --name) COMPREPLY=(); return ;;
                --gpu) mapfile -t COMPREPLY < <(compgen -W "$("${COMP_WORDS[0]}" completion --values gpus 2>/dev/null)" -- "$cur"); return ;;
                --restart) mapfile -t COMPREPLY < <(compgen -W "no on-failure" -- "$cur"); return ;;
                --grace-s) COMPREPLY=(); return ;;
                --backoff-s) COMPREPLY=(); return ;;
                --checkpoint-glob) COMPREPLY=(); return ;;
                --resume-args) COMPREPLY=(); return ;;
                --runtime-dir) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            [[ "$cur" != -* ]] && { compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return; }
            words="-h --help --conv2d-fallback --conv2d-autotune --conv2d-tune-cache --spawn --heartbeat-file --pause-file --name --gpu --restart --grace-s --backoff-s --checkpoint-glob --resume-args --runtime-dir --no-attach"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        check-config)
            case "$prev" in
                -c|--config) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            [[ "$cur" != -* ]] && { compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return; }
            words="-h --help -c --config"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
        completion)
            case "$prev" in
            esac
            [[ "$cur" == -* ]] && words="-h --help" || words="bash zsh fish"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
            ;;
    esac
}
complete -o default -F _gpuwatch gpuwatch
