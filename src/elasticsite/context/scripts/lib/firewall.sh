# Firewall helpers of the shipped scripts (sourced after elasticsite.sh).
#
# Opens the cluster's TCP ports to the context's members and refuses them to anyone
# else, in rules of our own: an nftables table "inet elasticsite" holding sets of
# member addresses (a join or leave adds or removes one element, nobody else's
# rules are read or flushed), or, without nft, an iptables/ip6tables chain
# "ELASTICSITE" jumped to from INPUT.
#
# Settings (from the agent's environment):
#   ELASTICSITE_FIREWALL        off | auto (default) | on. "auto" acts only when the
#                               agent root is "/": a scratch root means a test or a
#                               dry run, and the host's firewall is not under it.
#   ELASTICSITE_FIREWALL_PORTS  TCP ports and ranges, comma or space separated
#                               (default 22,6817-6818,60001-63000: SSH, slurmctld
#                               and slurmd, srun's port range).
#   ELASTICSITE_FIREWALL_ALLOW  addresses or prefixes always let through to those
#                               ports (the administrators' network, the head node
#                               if it runs no agent). Empty by default: mind SSH.
#
# Member addresses are also kept, one a line, in
# ROOT/var/lib/elasticsite/firewall-<context>.peers, so that rules lost with a
# reboot (nftables rules are not persistent) are rebuilt with their members the
# next time any firewall script runs.

ES_TABLE=elasticsite
ES_CHAIN=ELASTICSITE

# es_fw_backend: print nft or iptables, or nothing (after saying why) to do nothing.
es_fw_backend() {
    case ${ELASTICSITE_FIREWALL:-auto} in
    off)
        es_log "ELASTICSITE_FIREWALL=off: firewall left alone"
        return 0
        ;;
    auto)
        if [ "${ES_ROOT%/}" != "" ]; then
            es_log "agent root is $ES_ROOT, not /: firewall left alone (ELASTICSITE_FIREWALL=on to force)"
            return 0
        fi
        ;;
    on) ;;
    *)
        es_log "ELASTICSITE_FIREWALL must be off, auto or on, not '$ELASTICSITE_FIREWALL'"
        return 1
        ;;
    esac
    if command -v nft >/dev/null 2>&1; then
        echo nft
    elif command -v iptables >/dev/null 2>&1; then
        echo iptables
    else
        es_log "neither nft nor iptables is installed: firewall left alone"
    fi
}

es_fw_ports() {
    printf '%s\n' "${ELASTICSITE_FIREWALL_PORTS:-22,6817-6818,60001-63000}" |
        tr ' ' ',' | tr -s ',' | sed 's/^,//; s/,$//'
}

es_fw_peers_file() {
    es_path "var/lib/elasticsite/firewall-$(es_context).peers"
}

es_is_v6() {
    case $1 in *:*) return 0 ;; *) return 1 ;; esac
}

# es_fw_nft_ruleset: the table, for "nft -f -", with the remembered members.
es_fw_nft_ruleset() {
    ports=$(es_fw_ports | sed 's/,/, /g')
    printf 'table inet %s {\n' "$ES_TABLE"
    printf '\tset peers4 { type ipv4_addr; }\n'
    printf '\tset peers6 { type ipv6_addr; }\n'
    printf '\tchain input {\n'
    printf '\t\ttype filter hook input priority filter - 10; policy accept;\n'
    printf '\t\tiif "lo" accept\n'
    printf '\t\tct state established,related accept\n'
    printf '\t\tip saddr @peers4 tcp dport { %s } accept\n' "$ports"
    printf '\t\tip6 saddr @peers6 tcp dport { %s } accept\n' "$ports"
    for a in $(printf '%s\n' "${ELASTICSITE_FIREWALL_ALLOW:-}" | tr ',' ' '); do
        if es_is_v6 "$a"; then fam=ip6; else fam=ip; fi
        printf '\t\t%s saddr %s tcp dport { %s } accept\n' "$fam" "$a" "$ports"
    done
    printf '\t\ttcp dport { %s } reject with tcp reset\n' "$ports"
    printf '\t}\n}\n'
    if [ -s "$(es_fw_peers_file)" ]; then
        while read -r a; do
            [ -n "$a" ] || continue
            if es_is_v6 "$a"; then set=peers6; else set=peers4; fi
            printf 'add element inet %s %s { %s }\n' "$ES_TABLE" "$set" "$a"
        done <"$(es_fw_peers_file)"
    fi
}

# es_fw_ensure BACKEND: create our table or chain if it is missing (first start, or
# after a reboot), with the members remembered so far.
es_fw_ensure() {
    if [ "$1" = nft ]; then
        nft list table inet "$ES_TABLE" >/dev/null 2>&1 && return 0
        es_fw_nft_ruleset | nft -f - || { es_log "cannot create table inet $ES_TABLE"; return 1; }
        es_log "created nftables table inet $ES_TABLE"
    else
        for ipt in iptables ip6tables; do
            command -v "$ipt" >/dev/null 2>&1 || continue
            "$ipt" -n -L "$ES_CHAIN" >/dev/null 2>&1 && continue
            ports=$(es_fw_ports | tr '-' ':')
            "$ipt" -N "$ES_CHAIN"
            "$ipt" -A "$ES_CHAIN" -i lo -j RETURN
            "$ipt" -A "$ES_CHAIN" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
            for a in $(printf '%s\n' "${ELASTICSITE_FIREWALL_ALLOW:-}" | tr ',' ' '); do
                if es_is_v6 "$a"; then [ "$ipt" = ip6tables ]; else [ "$ipt" = iptables ]; fi &&
                    "$ipt" -A "$ES_CHAIN" -s "$a" -p tcp -m multiport --dports "$ports" -j ACCEPT
            done
            "$ipt" -A "$ES_CHAIN" -p tcp -m multiport --dports "$ports" -j REJECT --reject-with tcp-reset
            "$ipt" -C INPUT -j "$ES_CHAIN" 2>/dev/null || "$ipt" -I INPUT 1 -j "$ES_CHAIN"
            es_log "created $ipt chain $ES_CHAIN"
            if [ -s "$(es_fw_peers_file)" ]; then
                while read -r a; do
                    [ -n "$a" ] || continue
                    if es_is_v6 "$a"; then [ "$ipt" = ip6tables ]; else [ "$ipt" = iptables ]; fi &&
                        es_fw_ipt_peer "$ipt" add "$a"
                done <"$(es_fw_peers_file)"
            fi
        done
    fi
}

# es_fw_ipt_peer IPT add|delete ADDRESS: one ACCEPT rule per member, above the reject.
es_fw_ipt_peer() {
    ports=$(es_fw_ports | tr '-' ':')
    if "$1" -C "$ES_CHAIN" -s "$3" -p tcp -m multiport --dports "$ports" -j ACCEPT 2>/dev/null; then
        [ "$2" = delete ] && "$1" -D "$ES_CHAIN" -s "$3" -p tcp -m multiport --dports "$ports" -j ACCEPT
    else
        [ "$2" = add ] && "$1" -I "$ES_CHAIN" 1 -s "$3" -p tcp -m multiport --dports "$ports" -j ACCEPT
    fi
    return 0
}

# es_firewall add|delete ADDRESS: let a member in, or shut a departed one out.
es_firewall() {
    backend=$(es_fw_backend) || return 1
    [ -n "$backend" ] || return 0
    peers=$(es_fw_peers_file)
    mkdir -p "$(dirname "$peers")"
    tmp=$(es_prepare "$peers")
    grep -vxF -e "$2" "$peers" >"$tmp" || true
    [ "$1" = add ] && printf '%s\n' "$2" >>"$tmp"
    es_install "$tmp" "$peers" 600
    es_fw_ensure "$backend" || return 1
    if es_is_v6 "$2"; then set=peers6 ipt=ip6tables; else set=peers4 ipt=iptables; fi
    if [ "$backend" = nft ]; then
        if [ "$1" = add ]; then
            nft add element inet "$ES_TABLE" "$set" "{ $2 }"
        elif nft get element inet "$ES_TABLE" "$set" "{ $2 }" >/dev/null 2>&1; then
            nft delete element inet "$ES_TABLE" "$set" "{ $2 }"
        fi
    else
        es_fw_ipt_peer "$ipt" "$1" "$2"
    fi
}
