#!/usr/bin/env bash
# Mutation testing of the packages that hold the barrier and replication
# logic, with gremlins (github.com/go-gremlins/gremlins). It is a
# developer tool, kept out of go.mod and out of the default CI run (it
# takes tens of minutes); run it on the packages a change touches before
# resolving an issue, and compare with docs/MUTATION.md.
#
#   scripts/mutation.sh                      # shard router reconciler metadata
#   scripts/mutation.sh shard partition      # chosen packages
#
# Environment:
#   GREMLINS_BIN      where the pinned gremlins is installed (default: a
#                     cache directory under the user's cache dir)
#   MUTATION_OUT      directory for the per-package logs and JSON results
#                     (default: a fresh temporary directory)
#   MUTATION_WORKERS  mutants tested in parallel (default 1: the test
#                     suites themselves use the cores)
#   MUTATION_TIMEOUT  bound on one package's run (default 60m)
#
# Gremlins mutates one package at a time and runs that package's own
# tests against each mutant covered by them (a mutant no test of the
# package executes is reported NOT COVERED and not run). Efficacy is
# KILLED / (KILLED + LIVED); TIMED OUT mutants (the tests hung, which also
# fails them) are outside that ratio. Each package's summary is printed
# last in its log.
set -euo pipefail
cd "$(dirname "$0")/.."

version=v0.6.0
bin_dir=${GREMLINS_BIN:-"$(go env GOCACHE)/../parkway-tools/gremlins-$version"}
gremlins="$bin_dir/gremlins"
if ! go version -m "$gremlins" 2>/dev/null | grep -q "github.com/go-gremlins/gremlins[[:space:]]*$version"; then
	mkdir -p "$bin_dir"
	# go install pkg@version builds outside this module: go.mod is untouched.
	GOBIN="$bin_dir" go install "github.com/go-gremlins/gremlins/cmd/gremlins@$version"
fi

out=${MUTATION_OUT:-"$(mktemp -d)"}
mkdir -p "$out"
workers=${MUTATION_WORKERS:-1}
limit=${MUTATION_TIMEOUT:-60m}
if [ "$#" -eq 0 ]; then
	set -- shard router reconciler metadata
fi

status=0
for pkg in "$@"; do
	echo "== $pkg (log: $out/$pkg.log)"
	# -count=1: a cached baseline run would make gremlins time mutants
	# out against a near-zero test time.
	if ! GOFLAGS="${GOFLAGS:+$GOFLAGS }-count=1" timeout "$limit" "$gremlins" unleash --workers "$workers" \
		--timeout-coefficient "${MUTATION_TIMEOUT_COEFFICIENT:-10}" \
		-o "$out/$pkg.json" "./$pkg" >"$out/$pkg.log" 2>&1; then
		echo "   gremlins failed or hit the $limit bound; see the log"
		status=1
	fi
	grep -E '^(Killed|Timed out|Test efficacy|Mutator coverage):' "$out/$pkg.log" | sed 's/^/   /' || true
	grep -E '^ *LIVED ' "$out/$pkg.log" | sed 's/^/   /' || true
done
exit "$status"
