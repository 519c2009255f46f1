#!/usr/bin/env bash
# scripts/doc-check (issue 31, point 6): the tree's docs pass, and a fixture
# tree whose docs name a missing file, a missing module, an undefined
# function and an unknown name of ours fails, naming each with its line.
# usage: test_doc_check.sh SCRIPT
set -uo pipefail
script=$1
root=$(cd "$(dirname "$script")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$script" --root "$root" 2>&1) || fail "the tree's docs name what does not exist:
$out"

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs" "$tmp/mod" "$tmp/scripts"
cat > "$tmp/mod/thing.c" <<'C'
int mod_thing_open(void) { return 0; }
static const char *fn = "mod_remote_call";
C
cat > "$tmp/mod/thing.h" <<'C'
int mod_thing_open(void);
C
cat > "$tmp/README.md" <<'D'
`mod/thing.c` and `mod/thing.h/.c` and `mod/thing` exist; `mod/gone.c` does not.
`rpc_thing_open()` is not defined; `mod_thing_open()` is.
D
cat > "$tmp/docs/design.md" <<'D'
See [the code](../mod/thing.c) and [nothing](../mod/nothing.c), and `mod/other`.
`rpc_never_named` is no name of ours; `thing.c` is found by its name.
```
`mod/in_a_code_block.c` is not checked
```
Historical: mod/removed.c, written without backticks.
D
out=$("$script" --root "$tmp" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "doc-check of a broken fixture exited $rc, not 1:
$out"
for want in "README.md:1: no file 'mod/gone.c' in the tree" \
            "README.md:2: function rpc_thing_open() is not defined in the tree" \
            "docs/design.md:1: no file '../mod/nothing.c' in the tree" \
            "docs/design.md:1: no file 'mod/other' in the tree" \
            "docs/design.md:2: 'rpc_never_named' is named nowhere in the code" \
            "5 not found"; do
  grep -qF -- "$want" <<<"$out" || fail "doc-check did not say: $want
it said:
$out"
done
n=$(grep -c "^[^ ]*\.md:[0-9]*: " <<<"$out")
[ "$n" -eq 5 ] || fail "doc-check reported $n lines, not 5 (a false alarm?):
$out"
echo "test_doc_check: passed"
