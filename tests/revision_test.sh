#!/usr/bin/env bash
# cmake/revision.cmake: the source hash in the bundle follows every byte of keel's sources (and
# nothing else), an unchanged tree leaves the header untouched (no rebuild), and the keel that
# was built carries the hash of the tree it was built from.
# Usage: revision_test.sh KEEL CMAKE SOURCE_DIR DIRS (DIRS comma-separated, as the build passes)
set -u
keel="$1" cmake="$2" src="$3" dirs="$4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

stamp() {  # stamp TREE DIRS: runs the script, prints the source hash it wrote
  "$cmake" -DSRC="$1" -DDIRS="$2" -DOUT="$tmp/out.h" -P "$src/cmake/revision.cmake" >/dev/null ||
    { echo "cmake failed"; return; }
  sed -n 's/^#define KEEL_SOURCE_HASH "\([0-9a-f]*\)"$/\1/p' "$tmp/out.h"
}

# A small fake tree: two rooms (one nested), a top-level header, and tests that do not count.
t="$tmp/tree"
mkdir -p "$t/ir" "$t/backend/cpu" "$t/tests"
printf 'int a;\n' >"$t/ir/a.cpp"
printf '#pragma once\n' >"$t/ir/a.h"
printf 'OP(add)\n' >"$t/ir/ops.def"
printf 'template @X@\n' >"$t/backend/cpu/abi_text.cpp.in"
printf '// umbrella\n' >"$t/keel.h"
printf 'TEST(x) {}\n' >"$t/tests/x_test.cpp"
printf 'notes\n' >"$t/ir/README.md"
d="ir,backend,keel.h"
base=$(stamp "$t" "$d")
[[ $base =~ ^[0-9a-f]{16}$ ]] || fail "no 16-digit source hash: '$base'"

touch -d '2001-01-01' "$tmp/out.h"
[[ $(stamp "$t" "$d") == "$base" ]] || fail "the hash of an unchanged tree changed"
[[ $(stat -c %Y "$tmp/out.h") == $(date -d '2001-01-01' +%s) ]] ||
  fail "an unchanged tree rewrote the header (every build would recompile the bundle)"

changed() {  # changed NAME: the hash differs from the base now; then the tree is put back
  local now
  now=$(stamp "$t" "$d")
  [[ -n $now && $now != "$base" ]] || fail "$1 did not change the hash"
}
for f in ir/a.cpp ir/a.h ir/ops.def backend/cpu/abi_text.cpp.in keel.h; do
  cp "$t/$f" "$tmp/saved"
  printf 'x' >>"$t/$f"
  changed "one more byte in $f"
  cp "$tmp/saved" "$t/$f"
  [[ $(stamp "$t" "$d") == "$base" ]] || fail "restoring $f did not restore the hash"
done
sed -i 's/int a/int b/' "$t/ir/a.cpp"
changed "one changed byte in ir/a.cpp"
sed -i 's/int b/int a/' "$t/ir/a.cpp"
mv "$t/ir/a.h" "$t/ir/b.h"
changed "renaming ir/a.h"
mv "$t/ir/b.h" "$t/ir/a.h"
printf 'int n;\n' >"$t/backend/cpu/new.cpp"
changed "a new source file"
rm "$t/backend/cpu/new.cpp"
printf 'changed\n' >>"$t/tests/x_test.cpp"
printf 'changed\n' >>"$t/ir/README.md"
[[ $(stamp "$t" "$d") == "$base" ]] || fail "tests or documentation changed the hash"
"$cmake" -DSRC="$t" -DDIRS="" -DOUT="$tmp/none.h" -P "$src/cmake/revision.cmake" >/dev/null 2>&1 &&
  fail "an empty DIRS was accepted (every build would stamp the same hash)"

# The keel under test stamps the hash of the sources it was built from, over the rooms the
# build lists (rebuild after editing a source, or this fails).
built=$("$keel" bundle | sed -n 's/^keel.sources *\([0-9a-f]*\)$/\1/p')
[[ -n $built && $built == $(stamp "$src" "$dirs") ]] ||
  fail "keel bundle says keel.sources '$built' but the sources hash to '$(stamp "$src" "$dirs")'"
for room in ir files train tools; do
  [[ ",$dirs," == *",$room,"* ]] || fail "the build does not hash $room/"
done

[[ $fails -eq 0 ]] && echo "revision: ok"
[[ $fails -eq 0 ]]
