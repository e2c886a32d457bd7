#!/usr/bin/env bash
# `buf lint` (buf.yaml: STANDARD and COMMENTS) and `buf breaking` of proto/ against the last release.
# `make lint` runs it with the buf that `make node-deps` installed from package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF="${BUF:-node_modules/.bin/buf}"

# The last release's commit, the protos that callers may have generated code from. No release is tagged
# yet, so this is main as it stood when the breaking-change check was added; move it to each release's
# commit when that release is cut. A commit rather than a tag: clones and merges carry commits, and a tag
# a clone lacks would make the check fail for the wrong reason.
PROTO_BASELINE_COMMIT=2bad26ab68f4ff9c66d399dfaf02a70b3148c78a

if [[ ! -x "$BUF" ]]; then
  echo "buf not found at $BUF: run \`make node-deps\`" >&2
  exit 1
fi
if ! git cat-file -e "${PROTO_BASELINE_COMMIT}^{commit}" 2>/dev/null; then
  echo "the baseline commit $PROTO_BASELINE_COMMIT is not in this clone (a shallow clone?): fetch the history" >&2
  exit 1
fi

if git show "${PROTO_BASELINE_COMMIT}:proto/jobs/v1/jobs.proto" | grep -q '^option go_package' \
  && grep -q 'FILE_SAME_GO_PACKAGE' buf.yaml; then
  echo "the baseline has the language options: delete their breaking exceptions from buf.yaml" >&2
  exit 1
fi

"$BUF" lint

# The baseline's proto/ is written out with `git archive` rather than read through buf's git input,
# which clones with a limited depth and would lose the commit as main moves on.
baseline="$(mktemp -d)"
trap 'rm -rf "$baseline"' EXIT
if git cat-file -e "${PROTO_BASELINE_COMMIT}:buf.yaml" 2>/dev/null; then
  git archive "$PROTO_BASELINE_COMMIT" buf.yaml proto | tar -x -C "$baseline"
  against="$baseline"
else
  # A baseline from before buf.yaml: its proto/ folder is the module.
  git archive "$PROTO_BASELINE_COMMIT" proto | tar -x -C "$baseline"
  against="$baseline/proto"
fi
"$BUF" breaking --against "$against"
echo "buf lint and buf breaking (against ${PROTO_BASELINE_COMMIT:0:12}): no findings"
