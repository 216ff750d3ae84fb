#!/bin/sh
# fuzz.sh runs every fuzz target of the decoders of disk and network bytes
# for a bounded time each (plain `go test` already runs their seed
# corpora). Usage: scripts/fuzz.sh [time per target, default 10s]
#
# A failure leaves the crashing input under the package's
# testdata/fuzz/<target>/: commit it with the fix, and `go test` replays
# it from then on.
set -eu
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}

# package target — one line per target. internal/lint's
# TestFuzzScriptListsEveryTarget fails when a Fuzz* function is missing.
targets='
./internal/wal FuzzDecode
./internal/tail FuzzTorn
./internal/replica FuzzStep
./internal/replica FuzzRaftLog
./internal/replica FuzzDecodeMark
./metadata FuzzDecodeCommand
./metadata FuzzDecodeSnapshot
./metadata FuzzDecodeGroupSnapshot
./metadata FuzzDecodeSnapshotFile
./metadata FuzzDecodeLogRecord
./partition FuzzDecode
./partition FuzzDecodeBatch
./partition FuzzDecodeJournal
./partition FuzzSegment
./partition FuzzSealedSegment
./partition FuzzIncarnation
./partition FuzzDecodeManifest
./partition FuzzDecodeJournalMark
./partition FuzzDecodeConsumerFile
./shard FuzzDecodeState
./shard FuzzDecodeCatchUp
./shard FuzzDecodeEntry
./transport FuzzReadFrame
./host FuzzDecodeRequest
./host FuzzDecodeResponse
./host FuzzDecodeRaftBatch
./host FuzzDecodeRaft
./host FuzzDecodeIdentity
./kafka FuzzDecodeBatches
./kafka FuzzReadRecord
./kafka FuzzProcess
./kafka FuzzSCRAM
./kafka FuzzDecodeGroupLog
./host FuzzLivenessReport
./host FuzzDecodeLease
./transport FuzzTCPInbound
./transport FuzzIdentityURI
'

failed=
# shellcheck disable=SC2086 # split the list into package/target pairs
set -- $targets
while [ $# -ge 2 ]; do
	pkg=$1 target=$2
	shift 2
	echo "== $pkg $target ($fuzztime)"
	go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" || failed="$failed $pkg:$target"
done
if [ -n "$failed" ]; then
	echo "fuzz failures:$failed" >&2
	exit 1
fi
