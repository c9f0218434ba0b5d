# shellcheck shell=sh
# Shared helpers of the shipped recontextualization scripts (sourced, not run).
#
# Everything is written under $ELASTICSITE_AGENT_ROOT ("/" in production), so the
# same scripts run against a scratch directory in tests. Files are replaced
# atomically (temporary file in the same directory, then rename), so a reader never
# sees a half-written /etc/hosts or ssh_known_hosts, and re-running a script with
# the same arguments leaves the same result (the agent may re-run the entry it was
# applying when it crashed).
#
# A node's fields come from another node, so they are untrusted text:
#   * they are read once, by es_node, from ELASTICSITE_NODE_* (the positional
#     arguments only stand in for a variable that is unset), and checked before
#     anything is written: a field not of its form stops the script with one line
#     on stderr naming it;
#   * they reach awk through ENVIRON only (never "awk -v", which expands
#     backslash escapes), are compared there as strings only (awk would compare
#     "100" and "1e2" as equal numbers), and the shell only ever expands them
#     inside quotes;
#   * a script writes only the lines it owns, inside a marked block per context
#     ("# BEGIN elasticsite CTX" ... "# END elasticsite CTX"), and a delete removes
#     exactly the node's own line (and the block, once empty).

ES_ROOT=${ELASTICSITE_AGENT_ROOT:-/}

# Byte-wise character classes for awk, whatever the locale.
LC_ALL=C
export LC_ALL

# Checks of untrusted text, as awk functions; prepended to the awk programs below.
ES_AWK_CHECKS='
# A host name (RFC 1123): letters, digits and hyphens, labels of 1-63 characters
# joined by dots, no label starting or ending with a hyphen, 253 characters at most.
function es_host(h,   label, n, i) {
    if (length(h) > 253 || h !~ /^[A-Za-z0-9.-]+$/) return 0
    n = split(h, label, ".")
    for (i = 1; i <= n; i++)
        if (length(label[i]) < 1 || length(label[i]) > 63 || label[i] ~ /^-|-$/) return 0
    return 1
}
# A dotted quad: four numbers 0-255, without leading zeros.
function es_v4(a,   octet, i) {
    if (a !~ /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$/) return 0
    split(a, octet, ".")
    for (i = 1; i <= 4; i++)
        if (length(octet[i]) > 3 || octet[i] + 0 > 255 || octet[i] ~ /^0./) return 0
    return 1
}
# An IPv6 address: groups of 1-4 hex digits separated by colons, at most one "::",
# optionally ending with a dotted quad (which stands for two groups). No scope id,
# brackets or prefix.
function es_v6(a,   group, n, i, groups, gaps) {
    if (length(a) > 45 || a !~ /^[0-9A-Fa-f:.]+$/ || a !~ /:/) return 0
    if (a ~ /\./) {
        if (!match(a, /:[0-9.]+$/) || !es_v4(substr(a, RSTART + 1))) return 0
        a = substr(a, 1, RSTART) "0:0"
    }
    if (index(a, ":::") || a ~ /^:[^:]/ || a ~ /[^:]:$/) return 0
    gaps = gsub(/::/, "::", a)
    if (gaps > 1) return 0
    n = split(a, group, ":")
    for (i = 1; i <= n; i++) {
        if (group[i] == "") continue
        if (length(group[i]) > 4) return 0
        groups++
    }
    return gaps ? groups < 8 : groups == 8
}
function es_address(a) { return es_v4(a) || es_v6(a) }
# An address, or an address and a prefix length: 10.1.0.0/16, fd00::/8.
function es_prefix(p,   n, part) {
    n = split(p, part, "/")
    if (n == 1) return es_address(p)
    if (n != 2 || part[2] !~ /^[0-9]+$/ || part[2] ~ /^0./) return 0
    if (es_v4(part[1])) return part[2] + 0 <= 32
    return es_v6(part[1]) && part[2] + 0 <= 128
}
# An SSH public key line, "TYPE BASE64 [COMMENT]", of a known type, without any
# control character (C0, DEL, or C1 encoded in UTF-8).
function es_key(k,   field) {
    if (k ~ /[\001-\037\177]/ || k ~ /\302[\200-\237]/) return 0
    if (k !~ /^[^ ]+ +[A-Za-z0-9+\/]+=?=?( .*)?$/) return 0
    split(k, field, " ")
    return index(" ssh-ed25519 ssh-rsa ecdsa-sha2-nistp256 ecdsa-sha2-nistp384" \
        " ecdsa-sha2-nistp521 sk-ssh-ed25519@openssh.com" \
        " sk-ecdsa-sha2-nistp256@openssh.com ", " " field[1] " ") > 0
}
# A context id: letters, digits, "_" and "-".
function es_ctx(c) { return c ~ /^[A-Za-z0-9_-]+$/ }
# Text safe to show in one log line: printable ASCII, 60 characters at most.
function es_shown(v) {
    gsub(/[^ -~]/, "?", v)
    return length(v) > 60 ? substr(v, 1, 60) "..." : v
}
'

# es_path REL: REL under the agent root.
es_path() {
    printf '%s/%s\n' "${ES_ROOT%/}" "$1"
}

# es_log MESSAGE...: one line on stderr, prefixed with the script's name.
es_log() {
    printf '%s: %s\n' "${0##*/}" "$*" >&2
}

# es_shown VALUE: VALUE as it may appear in a log line (non-printables as "?").
es_shown() {
    ES_VALUE=$1 awk "$ES_AWK_CHECKS"'BEGIN { print es_shown(ENVIRON["ES_VALUE"]) }'
}

# es_is KIND VALUE: whether VALUE passes es_KIND (host, address, prefix, key, ctx).
es_is() {
    ES_VALUE=$2 awk -v kind="$1" "$ES_AWK_CHECKS"'BEGIN {
        v = ENVIRON["ES_VALUE"]
        if (kind == "host") exit !es_host(v)
        if (kind == "address") exit !es_address(v)
        if (kind == "prefix") exit !es_prefix(v)
        if (kind == "key") exit !es_key(v)
        if (kind == "ctx") exit !es_ctx(v)
        exit 1
    }'
}

# es_check KIND FIELD VALUE WHAT: return 1, saying "refusing FIELD ...: not WHAT",
# unless VALUE is a KIND.
es_check() {
    es_is "$1" "$3" && return 0
    es_log "refusing $2 '$(es_shown "$3")': not $4"
    return 1
}

# es_check_host FIELD VALUE, es_check_address FIELD VALUE, es_check_key FIELD VALUE:
# check one field of a node (FIELD names it in the error).
es_check_host() {
    es_check host "$1" "$2" "an RFC 1123 host name"
}
es_check_address() {
    es_check address "$1" "$2" "a plain IPv4 or IPv6 address (no scope id, brackets or prefix)"
}
es_check_key() {
    es_check key "$1" "$2" "an SSH public key 'TYPE BASE64 [COMMENT]' of a known type, without control characters"
}

# es_context: print the context's id, the last path element of its URI ("default"
# if unset); return 1, saying so, if it has characters other than [A-Za-z0-9_-].
es_context() {
    es_ctx=${ELASTICSITE_CONTEXT_URI:-}
    es_ctx=${es_ctx%/}
    es_ctx=${es_ctx##*/}
    es_ctx=${es_ctx:-default}
    es_check ctx "context id" "$es_ctx" "made of letters, digits, '_' and '-'" || return 1
    printf '%s\n' "$es_ctx"
}

# es_node "$@": load the node's record into ES_SHORT, ES_HOST, ES_ADDR and ES_KEY
# ("TYPE BASE64", the comment dropped), and the context's id into ES_CTX, all
# exported for awk's ENVIRON; exit 1 if any of them is not of its form. Each
# ELASTICSITE_NODE_* variable wins over its argument (SHORT_HOSTNAME HOSTNAME
# ADDRESS SSH_HOST_KEY DATA). Call it at the top level of a script, before anything
# is written.
es_node() {
    ES_SHORT=${ELASTICSITE_NODE_SHORT_HOSTNAME-${1-}}
    ES_HOST=${ELASTICSITE_NODE_HOSTNAME-${2-}}
    ES_ADDR=${ELASTICSITE_NODE_ADDRESS-${3-}}
    ES_KEY=${ELASTICSITE_NODE_SSH_HOST_KEY-${4-}}
    es_check_host "short hostname" "$ES_SHORT" || exit 1
    es_check_host hostname "$ES_HOST" || exit 1
    es_check_address address "$ES_ADDR" || exit 1
    es_check_key "SSH host key" "$ES_KEY" || exit 1
    ES_KEY=$(ES_VALUE=$ES_KEY awk 'BEGIN { split(ENVIRON["ES_VALUE"], f, " "); print f[1] " " f[2] }')
    ES_CTX=$(es_context) || exit 1
    export ES_SHORT ES_HOST ES_ADDR ES_KEY ES_CTX
}

# es_prepare FILE: make sure FILE and its directory exist; print a new temporary file
# next to it (same file system, so the final rename is atomic).
es_prepare() {
    mkdir -p "$(dirname "$1")"
    [ -e "$1" ] || : >"$1"
    mktemp "$1.XXXXXX"
}

# es_install TMP FILE MODE: move TMP over FILE atomically with MODE. /etc/hosts is a
# bind mount in some containers, where rename fails; then copy in place instead.
es_install() {
    chmod "$3" "$1"
    sync "$1" 2>/dev/null || true
    if ! mv -f "$1" "$2" 2>/dev/null; then
        es_log "cannot rename over $2 (bind mount?); rewriting it in place"
        cat "$1" >"$2"
        rm -f "$1"
    fi
}

# es_block FORMAT OP FILE LINE: in FILE, this context's block, add (OP=add) or remove
# (OP=delete) the node's LINE. FORMAT says how a line names its node:
#   hosts        "ADDRESS<tab>HOSTNAME SHORT"
#   known_hosts  "HOSTNAME,SHORT,ADDRESS TYPE BASE64"
# An add first drops the block's lines for the same HOSTNAME (a node that rejoins
# with a new address or key is replaced), then appends LINE to the block, which it
# creates at the end of the file if need be; a block without its end line is closed.
# A delete drops the block's lines for exactly this node (host name, short name and
# address alike), and the block itself once it is empty. Lines outside the block,
# other contexts' blocks included, are copied as they are; a file left unchanged is
# not rewritten. LINE is never written if it could be read as anything but a plain
# entry (a marker, a comment, an "@" line, a control character).
es_block() {
    es_file=$3
    es_tmp=$(es_prepare "$es_file")
    if ! ES_LINE=$4 awk -v format="$1" -v op="$2" '
        BEGIN {
            begin = "# BEGIN elasticsite " ENVIRON["ES_CTX"]
            end = "# END elasticsite " ENVIRON["ES_CTX"]
            line = ENVIRON["ES_LINE"]
            host = ENVIRON["ES_HOST"]; short = ENVIRON["ES_SHORT"]; addr = ENVIRON["ES_ADDR"]
            if (line ~ /^@|#|[\001-\010\012-\037\177]/ || host == "") {
                print "refusing to write a line that is not a plain entry" > "/dev/stderr"
                exit 2
            }
        }
        # String equality, whatever the values look like: awk compares two fields
        # or ENVIRON values that look numeric as numbers ("100" == "1e2" == "0x64").
        function same(a, b) { return a "" == b "" }
        # Whether a block line is the node being added (same host name) or deleted
        # (same host name, short name and address).
        function node(   names) {
            if (format == "hosts") {
                if (op == "add") return same($2, host)
                return NF == 3 && same($1, addr) && same($2, host) && same($3, short)
            }
            split($1, names, ",")
            if (op == "add") return same(names[1], host)
            return same($1, host "," short "," addr)
        }
        # Print a block of ours, with the node added to the first one; none if empty.
        function flush(   i) {
            if (op == "add" && !added) { kept[++n] = line; added = 1 }
            if (n) { print begin; for (i = 1; i <= n; i++) print kept[i]; print end }
            n = 0
        }
        !inblock && $0 == begin { inblock = 1; next }
        inblock && $0 == end { flush(); inblock = 0; next }
        inblock { if (!node()) kept[++n] = $0; next }
        { print }
        END {
            if (inblock) flush()
            if (op == "add" && !added) { print begin; print line; print end }
        }' "$es_file" >"$es_tmp"; then
        rm -f "$es_tmp"
        es_log "cannot rewrite $es_file"
        return 1
    fi
    if cmp -s "$es_tmp" "$es_file"; then
        rm -f "$es_tmp"
    else
        es_install "$es_tmp" "$es_file" 644
    fi
}

# es_hosts OP: add or remove the node's line "ADDRESS<tab>HOSTNAME SHORT" in this
# context's block of ROOT/etc/hosts (after es_node).
es_hosts() {
    es_block hosts "$1" "$(es_path etc/hosts)" "$ES_ADDR	$ES_HOST $ES_SHORT"
}

# es_known_hosts OP: add or remove the node's line "HOSTNAME,SHORT,ADDRESS TYPE
# BASE64" in this context's block of ROOT/etc/ssh/ssh_known_hosts (after es_node).
# OpenSSH reads the markers as comments.
es_known_hosts() {
    es_block known_hosts "$1" "$(es_path etc/ssh/ssh_known_hosts)" "$ES_HOST,$ES_SHORT,$ES_ADDR $ES_KEY"
}
