package partition_test

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/parkway-io/parkway/partition"
)

const benchBatch, benchPayload = 100, 100

// benchMessages is one batch of benchBatch messages of benchPayload bytes.
func benchMessages() []partition.Message {
	msgs := make([]partition.Message, benchBatch)
	buf := make([]byte, benchBatch*benchPayload)
	for i := range msgs {
		msgs[i].Timestamp = int64(i)
		msgs[i].Payload = buf[i*benchPayload : (i+1)*benchPayload]
	}
	return msgs
}

// encodedBatch is the batch as a FileStore stores it: the bytes of its
// segment after one Append.
func encodedBatch(b *testing.B, msgs []partition.Message) []byte {
	b.Helper()
	dir := b.TempDir()
	s := newFileStore(b, partition.FileConfig{Dir: dir})
	ns := mustNS(b, 1, 1, 1)
	p := mustBuild(b, s, ns, 1)
	mustAppend(b, p, msgs)
	mustClose(b, p)
	enc, err := os.ReadFile(filepath.Join(partDir(dir, ns), segName(0, ".log")))
	if err != nil {
		b.Fatal(err)
	}
	return enc
}

// BenchmarkAppend appends batches of 100 messages of 100 bytes. Bytes/op
// counts payload only; allocs/op is per batch.
func BenchmarkAppend(b *testing.B) {
	stores := []struct {
		name string
		new  func(b *testing.B) partition.Store
	}{
		{"mem", func(*testing.B) partition.Store { return partition.NewMemStore() }},
		{"file", func(b *testing.B) partition.Store { return newFileStore(b, partition.FileConfig{Dir: b.TempDir()}) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			p := mustBuild(b, st.new(b), mustNS(b, 1, 1, 1), 1)
			defer mustClose(b, p)
			msgs := benchMessages()
			b.SetBytes(benchBatch * benchPayload)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Append(msgs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendVsBufferedFile compares batched FileStore appends (no
// fsync) with the floor for the same bytes: a bufio.Writer appending the
// encoded batch to one file. Both report MB/s of encoded bytes (records
// with their 60-byte headers), so the difference is the partition's
// overhead: encoding and checksumming, the index, one write(2) per batch
// instead of one per 64 KiB buffer, and segment rolls.
func BenchmarkAppendVsBufferedFile(b *testing.B) {
	msgs := benchMessages()
	enc := encodedBatch(b, msgs)
	b.Run("partition", func(b *testing.B) {
		p := mustBuild(b, newFileStore(b, partition.FileConfig{Dir: b.TempDir()}), mustNS(b, 1, 1, 1), 1)
		defer mustClose(b, p)
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Append(msgs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bufio", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "log"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w := bufio.NewWriterSize(f, 64<<10)
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := w.Write(enc); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkAppendSync appends a batch and Syncs after each: the cost of
// acknowledging every batch durably (no group commit).
func BenchmarkAppendSync(b *testing.B) {
	msgs := benchMessages()
	enc := encodedBatch(b, msgs)
	p := mustBuild(b, newFileStore(b, partition.FileConfig{Dir: b.TempDir()}), mustNS(b, 1, 1, 1), 1)
	defer mustClose(b, p)
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Append(msgs); err != nil {
			b.Fatal(err)
		}
		if err := p.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFileStoreBuild builds partitions on disk, one per iteration,
// all kept open (as a node keeps them): past a third of the descriptor
// budget the store closes idle files to make room, and before the budget
// existed the process ran out of descriptors. Run it with a fixed count,
// e.g. -benchtime 6000x.
func BenchmarkFileStoreBuild(b *testing.B) {
	s := newFileStore(b, partition.FileConfig{Dir: b.TempDir()})
	var ps []partition.Partition
	b.Cleanup(func() {
		for _, p := range ps {
			_ = p.Close()
		}
	})
	i := 0
	for b.Loop() {
		ps = append(ps, mustBuild(b, s, mustNS(b, 1, 1+uint32(i/1000), uint32(i%1000)), 1))
		i++
	}
}

// BenchmarkOpenTail opens a partition whose tail holds 64 MiB of 160-byte
// records: whole, damaged in its first record (the scan goes past the
// damage to the next whole record and on), and with 64 MiB of garbage
// after its last record (the resync scan reads all of it to find that
// nothing whole follows, then the torn bytes are truncated: the worst case
// of telling a torn write from damage). Bytes/op is the tail's size.
func BenchmarkOpenTail(b *testing.B) {
	const size = 64 << 20
	for _, c := range []string{"whole", "damaged", "garbage"} {
		b.Run(c, func(b *testing.B) {
			cfg := partition.FileConfig{Dir: b.TempDir()}
			ns := mustNS(b, 1, 1, 1)
			p := mustBuild(b, newFileStore(b, cfg), ns, 1)
			msgs := benchMessages()
			for p.Size() < size {
				if _, err := p.Append(msgs); err != nil {
					b.Fatal(err)
				}
			}
			mustClose(b, p)
			path := filepath.Join(partDir(cfg.Dir, ns), segName(0, ".log"))
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				b.Fatal(err)
			}
			fi, err := f.Stat()
			if err != nil {
				b.Fatal(err)
			}
			end := fi.Size()
			var garbage []byte
			switch c {
			case "damaged":
				if _, err := f.WriteAt([]byte{0xff}, 70); err != nil {
					b.Fatal(err)
				}
			case "garbage":
				garbage = make([]byte, size)
				x := uint32(1)
				for i := range garbage {
					x = x*1664525 + 1013904223
					garbage[i] = byte(x >> 24)
				}
			}
			b.SetBytes(size)
			for b.Loop() {
				if garbage != nil { // the torn bytes, again: the last open truncated them
					b.StopTimer()
					if _, err := f.WriteAt(garbage, end); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				p, err := newFileStore(b, cfg).Build(ns, 1)
				if err != nil {
					b.Fatal(err)
				}
				mustClose(b, p)
			}
			f.Close()
		})
	}
}
