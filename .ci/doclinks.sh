#!/usr/bin/env bash
# Checks that every relative link in README.md, docs/*.md and the benchmark
# results' READMEs resolves: [text](path) and ![figure](path) name a tracked
# file or directory, [text](#anchor) and [text](path#anchor) a heading of
# the target, and every docs/NAME.md the text mentions exists.
set -euo pipefail
cd "$(dirname "$0")/.."

files=(README.md docs/*.md)
while IFS= read -r f; do files+=("$f"); done < <(git ls-files 'bench/results/*.md')

# slugs FILE: the GitHub anchors of FILE's headings, one a line.
slugs() {
  grep -E '^#{1,6} ' "$1" | sed -E 's/^#+ +//' | tr '[:upper:]' '[:lower:]' |
    sed -E 's/`//g; s/[^a-z0-9 _-]//g; s/ /-/g'
}

bad=0
for f in "${files[@]}"; do
  dir=$(dirname "$f")
  # Links outside code spans and fences.
  links=$(awk '/^```/ { fenced = !fenced; next } !fenced' "$f" | sed -E 's/`[^`]*`//g' |
    grep -oE '\]\([^) ]+\)' | sed -E 's/^\]\(//; s/\)$//' || true)
  for l in $links; do
    case "$l" in
      http://* | https://* | mailto:*) continue ;;
    esac
    path=${l%%#*}
    anchor=""
    [[ "$l" == *"#"* ]] && anchor=${l#*#}
    target=$f
    if [ -n "$path" ]; then
      target=$dir/$path
      if [ ! -e "$target" ]; then
        echo "$f: link to $l: no $target"
        bad=$((bad + 1))
        continue
      fi
    fi
    if [ -n "$anchor" ] && [ -f "$target" ] && ! slugs "$target" | grep -qxF "$anchor"; then
      echo "$f: link to $l: no heading #$anchor in $target"
      bad=$((bad + 1))
    fi
  done
  # docs/NAME.md named in the text.
  for d in $(grep -oE 'docs/[a-z-]+\.md' "$f" | sort -u); do
    if [ ! -f "$d" ]; then
      echo "$f: names $d, which does not exist"
      bad=$((bad + 1))
    fi
  done
done
if [ "$bad" -gt 0 ]; then
  echo "$bad broken links"
  exit 1
fi
echo "links: ${#files[@]} files, every relative link resolves"
