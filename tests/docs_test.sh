#!/usr/bin/env bash
# The documentation: README.md stays a front page, every relative link in README.md,
# CHANGELOG.md and docs/*.md resolves (file and, for a page, its #anchor), the room table of
# docs/architecture.md lists exactly the repository's top-level folders, and docs/policy.md is
# what scripts/gen-policy-doc prints. One line per failure; exit 1 if any failed.
# Usage: bash tests/docs_test.sh SOURCE_DIR KEEL_BINARY
set -u
if [[ $# -ne 2 ]]; then
  echo "usage: bash tests/docs_test.sh SOURCE_DIR KEEL_BINARY" >&2
  exit 2
fi
src="$1"
keel="$2"
fails=0
checks=0
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. README.md is a front page.
readme="$src/README.md"
checks=$((checks + 1))
if [[ ! -f $readme ]]; then
  fail "README.md is missing"
else
  lines=$(wc -l <"$readme")
  bytes=$(wc -c <"$readme")
  ((lines <= 200)) || fail "README.md has $lines lines; a front page has at most 200 (move detail to docs/)"
  ((bytes <= 16384)) || fail "README.md has $bytes bytes; a front page has at most 16384 (move detail to docs/)"
fi

# 2. Every relative link resolves. Links are read outside fenced blocks and inline code; a link
# is "](target)", so its text may span lines. Anchors follow GitHub's rule for ASCII headings.
links_of() {
  awk '
    /^[[:space:]]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)
      while (match(line, /\]\([^)[:space:]]+([[:space:]]+"[^"]*")?\)/)) {
        target = substr(line, RSTART + 2, RLENGTH - 3)
        sub(/[[:space:]].*/, "", target)
        print FNR "\t" target
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}
anchors_of() {
  awk '
    /^[[:space:]]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    /^#+[[:space:]]/ {
      h = $0
      sub(/^#+[[:space:]]+/, "", h)
      h = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", h)
      gsub(/ /, "-", h)
      print h
    }' "$1"
}
pages=("$src/README.md" "$src/CHANGELOG.md")
for f in "$src"/docs/*.md; do [[ -f $f ]] && pages+=("$f"); done
for page in "${pages[@]}"; do
  [[ -f $page ]] || continue
  checks=$((checks + 1))
  rel=${page#"$src"/}
  while IFS=$'\t' read -r line target; do
    [[ $target =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]] && continue # http:, https:, mailto:
    path=${target%%#*}
    anchor=""
    [[ $target == *#* ]] && anchor=${target#*#}
    if [[ -z $path ]]; then
      file="$page"
    elif [[ $path == /* ]]; then
      fail "$rel:$line: link '$target' is absolute; write it relative to the page"
      continue
    else
      file="$(dirname "$page")/$path"
    fi
    if [[ ! -e $file ]]; then
      fail "$rel:$line: link '$target' points to $path, which does not exist"
    elif [[ -n $anchor && $file == *.md && -f $file ]] && ! anchors_of "$file" | grep -qxF -- "$anchor"; then
      fail "$rel:$line: link '$target': ${file#"$src"/} has no heading with anchor #$anchor"
    fi
  done < <(links_of "$page")
done

# 3. The room table of docs/architecture.md lists every top-level folder git tracks, and only
# folders that exist.
arch="$src/docs/architecture.md"
checks=$((checks + 1))
if [[ ! -f $arch ]]; then
  fail "docs/architecture.md is missing"
else
  # shellcheck disable=SC2016  # the backquotes are the table's, not a command
  sed -nE 's/^\| `([A-Za-z0-9_./-]+)\/` \|.*/\1/p' "$arch" | sort -u >"$tmp/listed"
  [[ -s $tmp/listed ]] || fail "docs/architecture.md: no room table (lines starting with '| \`name/\` |')"
  while read -r name; do
    [[ -d $src/$name ]] || fail "docs/architecture.md lists \`$name/\`, which is not a folder of the repository"
  done <"$tmp/listed"
  if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$src" ls-files -z | tr '\0' '\n' | sed -n 's|^\([^/]*\)/.*|\1|p' | grep -v '^\.' |
      sort -u >"$tmp/tracked"
    while read -r name; do
      grep -qxF -- "$name" "$tmp/listed" ||
        fail "docs/architecture.md's room table has no row for the folder \`$name/\` (add '| \`$name/\` | what it holds |')"
    done <"$tmp/tracked"
  else
    echo "note: $src is not a git checkout; the room table was checked against existing folders only"
  fi
fi

# 4. docs/policy.md is what scripts/gen-policy-doc prints for this binary.
checks=$((checks + 1))
if ! bash "$src/scripts/gen-policy-doc" "$keel" >"$tmp/policy.md" 2>"$tmp/policy.err"; then
  fail "scripts/gen-policy-doc $keel failed: $(head -1 "$tmp/policy.err")"
elif ! cmp -s "$tmp/policy.md" "$src/docs/policy.md"; then
  fail "docs/policy.md is stale: run scripts/gen-policy-doc build/keel > docs/policy.md"
fi

if ((fails > 0)); then
  echo "docs: $fails failures"
  exit 1
fi
echo "docs: $checks checks passed (README front page, links in ${#pages[@]} pages, room table, policy.md)"
