# Shared helpers of the shipped recontextualization scripts (sourced, not run).
#
# Everything is written under $ELASTICSITE_AGENT_ROOT ("/" in production), so the
# same scripts run against a scratch directory in tests. Files are replaced
# atomically (temporary file in the same directory, then rename), so a reader never
# sees a half-written /etc/hosts or ssh_known_hosts, and re-running a script with
# the same arguments leaves the same file (the agent may re-run the entry it was
# applying when it crashed).

ES_ROOT=${ELASTICSITE_AGENT_ROOT:-/}

# es_path REL: REL under the agent root.
es_path() {
    printf '%s/%s\n' "${ES_ROOT%/}" "$1"
}

# es_log MESSAGE...: one line on stderr, prefixed with the script's name.
es_log() {
    printf '%s: %s\n' "${0##*/}" "$*" >&2
}

# es_context: the context's id, the last path element of its URI ("default" if unset).
es_context() {
    ctx=${ELASTICSITE_CONTEXT_URI:-}
    ctx=${ctx%/}
    ctx=${ctx##*/}
    printf '%s\n' "${ctx:-default}"
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

# es_hosts OP SHORT HOSTNAME ADDRESS: add (OP=add) or remove (OP=delete) the node's
# line in this context's marked block of ROOT/etc/hosts. The block is created on the
# first add; lines outside it are never touched; a line for the same HOSTNAME is
# replaced, so adding twice leaves one line.
es_hosts() {
    es_file=$(es_path etc/hosts)
    es_tmp=$(es_prepare "$es_file")
    es_ctx=$(es_context)
    if ! awk -v begin="# BEGIN elasticsite $es_ctx" -v end="# END elasticsite $es_ctx" \
        -v op="$1" -v host="$3" -v line="$4	$3 $2" '
        $0 == begin { inblock = 1; seen = 1; print; next }
        inblock && $0 == end { if (op == "add") print line; inblock = 0; print; next }
        inblock { if ($2 != host) print; next }
        { print }
        END {
            if (inblock) { if (op == "add") print line; print end }
            else if (!seen && op == "add") { print begin; print line; print end }
        }' "$es_file" >"$es_tmp"; then
        rm -f "$es_tmp"
        es_log "cannot rewrite $es_file"
        return 1
    fi
    es_install "$es_tmp" "$es_file" 644
}

# es_known_hosts OP SHORT HOSTNAME ADDRESS KEY: add or remove the line
# "HOSTNAME,SHORT,ADDRESS TYPE BASE64" in ROOT/etc/ssh/ssh_known_hosts. Lines are
# recognised by their first host name, so re-adding a node replaces its line.
es_known_hosts() {
    es_file=$(es_path etc/ssh/ssh_known_hosts)
    es_tmp=$(es_prepare "$es_file")
    if ! printf '%s\n' "$5" | awk -v op="$1" -v host="$3" -v names="$3,$2,$4" -v file="$es_file" '
        NR == 1 { key = $1 " " $2; next }
        END {
            while ((getline l < file) > 0) {
                split(l, f, /[ \t]+/)
                split(f[1], h, ",")
                if (h[1] != host) print l
            }
            if (op == "add" && key != " ") print names " " key
        }' >"$es_tmp"; then
        rm -f "$es_tmp"
        es_log "cannot rewrite $es_file"
        return 1
    fi
    es_install "$es_tmp" "$es_file" 644
}
