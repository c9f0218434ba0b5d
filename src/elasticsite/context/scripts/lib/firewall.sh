# shellcheck shell=sh
# Firewall helpers of the shipped scripts (sourced after elasticsite.sh).
#
# Opens the cluster's TCP ports to the context's members and refuses them to anyone
# else, in rules of our own: an nftables table "inet elasticsite" holding sets of
# member addresses (a join or leave adds or removes one element, nobody else's
# rules are read or flushed), or, without nft, an iptables/ip6tables chain
# "ELASTICSITE" jumped to from INPUT.
#
# Settings (from the agent's environment), checked before any rule is made:
#   ELASTICSITE_FIREWALL        off | auto (default) | on. "auto" acts only when the
#                               agent root is "/": a scratch root means a test or a
#                               dry run, and the host's firewall is not under it.
#   ELASTICSITE_FIREWALL_PORTS  TCP ports and ranges (N or N-M, 1-65535), comma or
#                               space separated (default 22,6817-6818,60001-63000:
#                               SSH, slurmctld and slurmd, srun's port range).
#   ELASTICSITE_FIREWALL_ALLOW  addresses or prefixes (10.1.0.0/16, fd00::/8) always
#                               let through to those ports, comma or space separated
#                               (the administrators' network, the head node if it
#                               runs no agent). Empty by default: mind SSH.
#
# Member addresses are also kept, one a line, in
# ROOT/var/lib/elasticsite/firewall-<context>.peers, so that rules lost with a
# reboot (nftables rules are not persistent) are rebuilt with their members the
# next time any firewall script runs. Only checked addresses are written there, and
# when the rules are rebuilt each remembered line is checked again: one that is not
# an address, or that nft or iptables refuses, is skipped with a warning, so a bad
# line can never keep the table from being built.

ES_TABLE=elasticsite
ES_CHAIN=ELASTICSITE

# es_fw_settings: check the port and allow lists and set ES_FW_PORTS ("22,6817-6818")
# and ES_FW_ALLOW (one address or prefix a line); return 1, saying why, if either
# is not of its form.
es_fw_settings() {
    ES_FW_PORTS=$(ES_VALUE=${ELASTICSITE_FIREWALL_PORTS:-22,6817-6818,60001-63000} awk '
        BEGIN {
            n = split(ENVIRON["ES_VALUE"], item, /[ ,]+/)
            for (i = 1; i <= n; i++) {
                if (item[i] == "") continue
                if (item[i] !~ /^[1-9][0-9]*(-[1-9][0-9]*)?$/) exit 1
                m = split(item[i], r, "-")
                if (r[1] + 0 > 65535 || (m == 2 && (r[2] + 0 > 65535 || r[2] + 0 < r[1] + 0))) exit 1
                out = out (out == "" ? "" : ",") item[i]
            }
            if (out == "") exit 1
            print out
        }') || {
        es_log "ELASTICSITE_FIREWALL_PORTS must be TCP ports or ranges (N or N-M, 1-65535)," \
            "comma or space separated, not '$(es_shown "${ELASTICSITE_FIREWALL_PORTS-}")'"
        return 1
    }
    ES_FW_ALLOW=$(ES_VALUE=${ELASTICSITE_FIREWALL_ALLOW:-} awk "$ES_AWK_CHECKS"'
        BEGIN {
            n = split(ENVIRON["ES_VALUE"], item, /[ ,]+/)
            for (i = 1; i <= n; i++) {
                if (item[i] == "") continue
                if (!es_prefix(item[i])) exit 1
                print item[i]
            }
        }') || {
        es_log "ELASTICSITE_FIREWALL_ALLOW must be addresses or prefixes (10.1.0.0/16, fd00::/8)," \
            "comma or space separated, not '$(es_shown "${ELASTICSITE_FIREWALL_ALLOW-}")'"
        return 1
    }
}

# es_fw_backend: set ES_FW_BACKEND to nft or iptables, or to nothing (after saying
# why) to do nothing; when it acts, check the settings first (es_fw_settings).
# Returns 1 on a bad setting.
es_fw_backend() {
    ES_FW_BACKEND=
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
        es_log "ELASTICSITE_FIREWALL must be off, auto or on, not '$(es_shown "$ELASTICSITE_FIREWALL")'"
        return 1
        ;;
    esac
    es_fw_settings || return 1
    if command -v nft >/dev/null 2>&1; then
        ES_FW_BACKEND=nft
    elif command -v iptables >/dev/null 2>&1; then
        ES_FW_BACKEND=iptables
    else
        es_log "neither nft nor iptables is installed: firewall left alone"
    fi
}

es_fw_peers_file() {
    es_path "var/lib/elasticsite/firewall-$ES_CTX.peers"
}

es_is_v6() {
    case $1 in *:*) return 0 ;; *) return 1 ;; esac
}

# es_fw_remembered: the remembered member addresses, one a line, without repeats;
# a line that is not an address is skipped with a warning.
es_fw_remembered() {
    peers=$(es_fw_peers_file)
    [ -s "$peers" ] || return 0
    awk -v me="${0##*/}" "$ES_AWK_CHECKS"'
        $0 == "" || seen[$0]++ { next }
        es_address($0) { print; next }
        { printf "%s: skipping line %d of %s: %s is not an address\n",
              me, NR, FILENAME, "\047" es_shown($0) "\047" > "/dev/stderr" }
    ' "$peers"
}

# es_fw_remember add|delete ADDRESS: update the peers file (only checked addresses
# are ever written, and bad lines found there are dropped).
es_fw_remember() {
    peers=$(es_fw_peers_file)
    tmp=$(es_prepare "$peers")
    { es_fw_remembered | grep -vxF -e "$2" || true; } >"$tmp"
    [ "$1" = add ] && printf '%s\n' "$2" >>"$tmp"
    if cmp -s "$tmp" "$peers"; then rm -f "$tmp"; else es_install "$tmp" "$peers" 600; fi
}

# es_fw_nft_ruleset: our table, for "nft -f -", without members.
es_fw_nft_ruleset() {
    ports=$(printf '%s\n' "$ES_FW_PORTS" | sed 's/,/, /g')
    printf 'table inet %s {\n' "$ES_TABLE"
    printf '\tset peers4 { type ipv4_addr; }\n'
    printf '\tset peers6 { type ipv6_addr; }\n'
    printf '\tchain input {\n'
    printf '\t\ttype filter hook input priority filter - 10; policy accept;\n'
    printf '\t\tiif "lo" accept\n'
    printf '\t\tct state established,related accept\n'
    printf '\t\tip saddr @peers4 tcp dport { %s } accept\n' "$ports"
    printf '\t\tip6 saddr @peers6 tcp dport { %s } accept\n' "$ports"
    printf '%s\n' "$ES_FW_ALLOW" | while IFS= read -r a; do
        [ -n "$a" ] || continue
        if es_is_v6 "$a"; then fam=ip6; else fam=ip; fi
        printf '\t\t%s saddr %s tcp dport { %s } accept\n' "$fam" "$a" "$ports"
    done
    printf '\t\ttcp dport { %s } reject with tcp reset\n' "$ports"
    printf '\t}\n}\n'
}

# es_fw_nft_element ADDRESS: the "add element" command for one member.
es_fw_nft_element() {
    if es_is_v6 "$1"; then set=peers6; else set=peers4; fi
    printf 'add element inet %s %s { %s }\n' "$ES_TABLE" "$set" "$1"
}

# es_fw_nft_build: create our table with the remembered members. All in one
# transaction when nft takes them all; otherwise the table alone, then each member
# on its own, skipping (with a warning) any that nft refuses.
es_fw_nft_build() {
    members=$(es_fw_remembered)
    if { es_fw_nft_ruleset; printf '%s\n' "$members" | while IFS= read -r a; do
        [ -z "$a" ] || es_fw_nft_element "$a"
    done; } | nft -f - 2>/dev/null; then
        return 0
    fi
    es_fw_nft_ruleset | nft -f - || return 1
    printf '%s\n' "$members" | while IFS= read -r a; do
        [ -n "$a" ] || continue
        es_fw_nft_element "$a" | nft -f - ||
            es_log "skipping remembered member $a: nft refused it"
    done
}

# es_fw_ensure: create our table or chain if it is missing (first start, or after a
# reboot), with the members remembered so far.
es_fw_ensure() {
    if [ "$ES_FW_BACKEND" = nft ]; then
        nft list table inet "$ES_TABLE" >/dev/null 2>&1 && return 0
        es_fw_nft_build || { es_log "cannot create table inet $ES_TABLE"; return 1; }
        es_log "created nftables table inet $ES_TABLE"
        return 0
    fi
    ports=$(printf '%s\n' "$ES_FW_PORTS" | tr '-' ':')
    for ipt in iptables ip6tables; do
        command -v "$ipt" >/dev/null 2>&1 || continue
        "$ipt" -n -L "$ES_CHAIN" >/dev/null 2>&1 && continue
        "$ipt" -N "$ES_CHAIN"
        "$ipt" -A "$ES_CHAIN" -i lo -j RETURN
        "$ipt" -A "$ES_CHAIN" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
        printf '%s\n' "$ES_FW_ALLOW" | while IFS= read -r a; do
            if [ -z "$a" ] || ! es_fw_ipt_family "$ipt" "$a"; then continue; fi
            "$ipt" -A "$ES_CHAIN" -s "$a" -p tcp -m multiport --dports "$ports" -j ACCEPT
        done
        "$ipt" -A "$ES_CHAIN" -p tcp -m multiport --dports "$ports" -j REJECT --reject-with tcp-reset
        "$ipt" -C INPUT -j "$ES_CHAIN" 2>/dev/null || "$ipt" -I INPUT 1 -j "$ES_CHAIN"
        es_log "created $ipt chain $ES_CHAIN"
        es_fw_remembered | while IFS= read -r a; do
            es_fw_ipt_family "$ipt" "$a" || continue
            es_fw_ipt_peer "$ipt" add "$a" || es_log "skipping remembered member $a: $ipt refused it"
        done
    done
}

# es_fw_ipt_family IPT ADDRESS: whether ADDRESS belongs to IPT (iptables: IPv4,
# ip6tables: IPv6).
es_fw_ipt_family() {
    if es_is_v6 "$2"; then [ "$1" = ip6tables ]; else [ "$1" = iptables ]; fi
}

# es_fw_ipt_peer IPT add|delete ADDRESS: one ACCEPT rule per member, above the reject.
es_fw_ipt_peer() {
    ports=$(printf '%s\n' "$ES_FW_PORTS" | tr '-' ':')
    if "$1" -C "$ES_CHAIN" -s "$3" -p tcp -m multiport --dports "$ports" -j ACCEPT 2>/dev/null; then
        [ "$2" = add ] || "$1" -D "$ES_CHAIN" -s "$3" -p tcp -m multiport --dports "$ports" -j ACCEPT
    else
        [ "$2" = delete ] || "$1" -I "$ES_CHAIN" 1 -s "$3" -p tcp -m multiport --dports "$ports" -j ACCEPT
    fi
}

# es_firewall add|delete: let the node (es_node) in, or shut it out once departed.
es_firewall() {
    es_fw_backend || return 1
    [ -n "$ES_FW_BACKEND" ] || return 0
    es_fw_remember "$1" "$ES_ADDR"
    es_fw_ensure || return 1
    if es_is_v6 "$ES_ADDR"; then set=peers6 ipt=ip6tables; else set=peers4 ipt=iptables; fi
    if [ "$ES_FW_BACKEND" = nft ]; then
        if [ "$1" = add ]; then
            nft add element inet "$ES_TABLE" "$set" "{ $ES_ADDR }"
        elif nft get element inet "$ES_TABLE" "$set" "{ $ES_ADDR }" >/dev/null 2>&1; then
            nft delete element inet "$ES_TABLE" "$set" "{ $ES_ADDR }"
        fi
    elif command -v "$ipt" >/dev/null 2>&1; then
        es_fw_ipt_peer "$ipt" "$1" "$ES_ADDR"
    fi
}
