# SPDX-License-Identifier: LGPL-2.1-or-later
# bash completion for tpctl: commands, options, and the event names and systems of the running tpd
# (asked with `tpctl list`, quietly, within 2 s). Works without the bash-completion package.

# Prints the names of the events matching the glob $2, asked from tpd (socket $1, or the default).
_tpctl_events() {
        local -a args=(-q --no-pager --json=off)
        [[ -n $1 ]] && args+=(--socket "$1")
        if type -P timeout >/dev/null; then
                NO_COLOR=1 timeout 2 tpctl "${args[@]}" list "$2" 2>/dev/null
        else
                NO_COLOR=1 tpctl "${args[@]}" list "$2" 2>/dev/null
        fi | sed 's/ .*//'
}

_tpctl() {
        local commands='list describe enable disable status stream record replay convert top hist count latency export metrics call'
        local global='-h --help --version --socket= --json= -j --no-legend --no-pager -q --quiet'
        local methods='io.tpd.tracing.ListEvents io.tpd.tracing.DescribeEvent io.tpd.tracing.Enable
                io.tpd.tracing.Disable io.tpd.tracing.GetStatus io.tpd.tracing.Stream io.tpd.tracing.Record io.tpd.tracing.GetCounters
                io.tpd.tracing.Aggregate io.tpd.tracing.Configure org.varlink.service.GetInfo
                org.varlink.service.GetInterfaceDescription'
        # The line up to the cursor, split at blanks only: bash's own words split "sched:x" at ':'.
        local line=${COMP_LINE:0:COMP_POINT}
        [[ -z $COMP_LINE ]] && line="${COMP_WORDS[*]:0:COMP_CWORD+1}"
        local -a words
        read -ra words <<<"$line"
        [[ $line == *[[:space:]] || ${#words[@]} -eq 0 ]] && words+=('')
        local cur=${words[-1]} prev=${words[-2]-} verb='' socket='' i
        local -a reply=()

        local skip=0 command_at=0
        for ((i = 1; i < ${#words[@]} - 1; i++)); do
                if ((skip)); then
                        skip=0
                        continue
                fi
                case ${words[i]} in
                --)
                        # stream|record|top -- COMMAND: the rest is the command's line.
                        command_at=$((i + 1))
                        break
                        ;;
                --socket)
                        socket=${words[i + 1]}
                        skip=1
                        ;;
                --socket=*) socket=${words[i]#--socket=} ;;
                -e | --event | -p | --pid | -c | --cpu | -f | --filter | --cgroup | --unit | --with | --servers-file | --by | --field | --key | --linear | --interval) skip=1 ;;
                -*) ;;
                *) [[ -z $verb ]] && verb=${words[i]} ;;
                esac
        done

        if ((command_at)); then
                if ((${#words[@]} - 1 == command_at)); then
                        mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
                else
                        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
                fi
                return 0
        fi

        # An option's value in the same word (--event=NAME): completed as the value, prefix kept.
        local prefix='' what=''
        case $cur in
        --event=* | --pid=* | --cpu=* | --unit=* | --with=* | --socket=* | --servers-file=* | --by=*)
                prefix=${cur%%=*}=
                prev=${prefix%=}
                cur=${cur#"$prefix"}
                ;;
        esac
        case $prev in
        --socket | --servers-file) what=file ;;
        -e | --event) what=event ;;
        -p | --pid) what=pid ;;
        -c | --cpu) what=cpu ;;
        --unit) what=unit ;;
        --with) what=with ;;
        --by) what=by ;;
        -f | --filter | --cgroup | --field | --key | --linear | --interval | --duration) what=none ;;
        esac
        if [[ -z $what ]]; then
                case $cur in
                --json=*) what=json ;;
                -*) what=option ;;
                *)
                        case $verb in
                        '') what=command ;;
                        list | describe | enable | disable | stream | record | hist | count | latency) what=event ;;
                        replay | convert) what=file ;;
                        call) what=method ;;
                        *) what=none ;;
                        esac
                        ;;
                esac
        fi

        case $what in
        command) mapfile -t reply < <(compgen -W "$commands" -- "$cur") ;;
        method) mapfile -t reply < <(compgen -W "$methods" -- "$cur") ;;
        json) mapfile -t reply < <(compgen -P --json= -W 'short pretty off' -- "${cur#--json=}") ;;
        with) mapfile -t reply < <(compgen -W 'cgroup' -- "$cur") ;;
        # top's keys, or an aggregation's (a field of the event too, which only tpd knows).
        by)
                if [[ $verb == top ]]; then
                        mapfile -t reply < <(compgen -W 'pid cgroup unit' -- "$cur")
                else
                        mapfile -t reply < <(compgen -W 'comm pid cpu' -- "$cur")
                fi
                ;;
        file) mapfile -t reply < <(compgen -f -- "$cur") ;;
        pid) mapfile -t reply < <(compgen -W "$(cd /proc && compgen -G '[0-9]*')" -- "$cur") ;;
        # The units that have a cgroup, loaded now (systemctl's own completion lists them so).
        unit) mapfile -t reply < <(compgen -W "$(systemctl list-units --all --plain --no-legend --full \
                --type=service,scope,slice,socket,mount,swap 2>/dev/null | awk '{ print $1 }')" -- "$cur") ;;
        cpu) mapfile -t reply < <(compgen -W "$(seq 0 $(($(getconf _NPROCESSORS_CONF) - 1)))" -- "$cur") ;;
        option)
                local opts=$global
                case $verb in
                enable) opts+=' --filter=' ;;
                disable) opts+=' --all' ;;
                stream) opts+=' -e --event= -p --pid= --follow --cgroup= --unit= -c --cpu= -f --filter= --print --symbolic --symbolic= --count= --duration= --time= --ordered --ordered= --transport= --with= --stack --format= --' ;;
                record) opts+=' -o --output= -e --event= -p --pid= --follow --cgroup= --unit= -c --cpu= -f --filter= --format= --duration= --size= --rotate-size= --rotate-time= --keep= --file-version= --no-kallsyms --stack --force --' ;;
                convert) opts+=' --format=' ;;
                replay) opts+=' -e --event= -p --pid= -c --cpu= -f --filter= --print' ;;
                metrics) opts+=' --openmetrics' ;;
                top) opts+=' -n --iterations= -d --delay= --sort= --by= -e --event= --' ;;
                hist | count | latency)
                        opts+=' -p --pid= --follow --cgroup= --unit= -c --cpu= -f --filter= --by= --interval= --duration='
                        case $verb in
                        hist) opts+=' --field= --linear=' ;;
                        latency) opts+=' --key= --linear=' ;;
                        esac
                        ;;
                export) opts+=' -e --event= -p --pid= -c --cpu= -f --filter= --subject-prefix= --stream= --create-stream --replicas= --buffer-size= --batch-size= --servers-file= --creds= --tls-ca=' ;;
                esac
                mapfile -t reply < <(compgen -W "$opts" -- "$cur")
                ;;
        event)
                # tpd matches the glob: only what can complete comes back.
                if [[ $cur == *:* ]]; then
                        mapfile -t reply < <(_tpctl_events "$socket" "$cur*")
                else
                        # Systems first: 2,300 names are too many to show at once.
                        mapfile -t reply < <(_tpctl_events "$socket" "$cur*:*" | sed 's/:.*/:/' | sort -u)
                fi
                ;;
        esac

        if [[ -n $prefix ]]; then
                for i in "${!reply[@]}"; do
                        reply[i]=$prefix${reply[i]}
                done
                cur=$prefix$cur
        fi
        # Words ending in '=' or ':' are to be continued.
        if [[ ${#reply[@]} -eq 1 && ${reply[0]} == *[=:] ]]; then
                compopt -o nospace 2>/dev/null
        fi
        # bash replaces only its own current word, which starts after the last ':' or '=' it split at.
        local word=${COMP_WORDS[COMP_CWORD]-}
        local strip=$((${#cur} - ${#word}))
        [[ $word == [:=] ]] && strip=${#cur}
        if ((strip > 0)); then
                for i in "${!reply[@]}"; do
                        reply[i]=${reply[i]:strip}
                done
        fi
        COMPREPLY=("${reply[@]}")
}

complete -F _tpctl tpctl
