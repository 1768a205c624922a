# The checks the end-to-end scripts share (sourced: `. "$src/tests/e2e/checks.bash"`). Each
# check prints one line, `ok   - DESCRIPTION` or `FAIL - DESCRIPTION` with the text it looked
# at (indented, shown once however many checks fail on it); checks_done prints the count and
# returns the script's status.
#   ok DESCRIPTION                       a passed check
#   bad DESCRIPTION [TEXT]               a failed one, TEXT the output it concerns
#   expect DESCRIPTION TEXT REGEX        TEXT has a line matching the extended REGEX
#   expect_not DESCRIPTION TEXT REGEX    TEXT has none
#   expect_rc DESCRIPTION RC WANT [TEXT] an exit status
#   checks_done NAME                     "NAME: P passed, F failed"; status 0 when none failed
checks=0
fails=0
checks_shown=""
ok() {
    checks=$((checks + 1))
    echo "ok   - $1"
}
bad() {
    checks=$((checks + 1))
    fails=$((fails + 1))
    echo "FAIL - $1"
    if [ $# -gt 1 ] && [ "$checks_shown" != "$2" ]; then
        checks_shown=$2
        printf '%s\n' "$2" | head -40 | sed 's/^/       | /'
    fi
}
expect() {
    if printf '%s\n' "$2" | grep -Eq -- "$3"; then ok "$1"; else bad "$1 (no line matches /$3/)" "$2"; fi
}
expect_not() {
    if printf '%s\n' "$2" | grep -Eq -- "$3"; then bad "$1 (a line matches /$3/)" "$2"; else ok "$1"; fi
}
expect_rc() {
    if [ "$2" -eq "$3" ]; then ok "$1: exit $2"; else bad "$1: exit $2, expected $3" "${4:-}"; fi
}
checks_done() {
    echo "$1: $((checks - fails)) passed, $fails failed"
    [ "$fails" -eq 0 ]
}
