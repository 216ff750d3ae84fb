package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layered chain, top to bottom: a package may import those below it.
var chain = []string{"", "host", "reconciler", "shard", "router", "partition", "metadata"}

// The public seams: side effects behind narrow interfaces, usable by every
// layer.
var seams = []string{"vfs", "vfs/errorfs", "clock", "metrics", "transport"}

// listeners are protocol listeners over the client API: like a host, they
// use the public packages only, and only examples and host-side tests
// import them.
var listeners = []string{"kafka"}

// sim is the simulator: it drives the node engine, so it may import host
// and everything below it, but not the client API.
const sim = "internal/sim"

// kind is a package's place in the layering.
type kind int

const (
	kindUnknown  kind = iota
	kindTop           // examples, and embedtest: hosts' view, public packages only
	kindChain         // root, host, reconciler, shard, router, partition, metadata
	kindSeam          // vfs, vfs/errorfs, clock, metrics, transport
	kindSim           // internal/sim
	kindInternal      // every other internal package: a leaf
	kindCmd           // cmd/...: programs, which may use anything but the simulator
	kindListener      // kafka: a protocol listener over the client API
)

func (k kind) String() string {
	return [...]string{"unclassified", "example", "layer", "seam", "simulator", "internal leaf", "command", "listener"}[k]
}

// classify places a package given its path relative to the module ("" is
// the root package).
func classify(rel string) kind {
	switch {
	case rel == "embedtest" || rel == "examples" || strings.HasPrefix(rel, "examples/"):
		return kindTop
	case slices.Contains(chain, rel):
		return kindChain
	case slices.Contains(seams, rel):
		return kindSeam
	case rel == sim:
		return kindSim
	case slices.Contains(listeners, rel):
		return kindListener
	case rel == "internal" || strings.HasPrefix(rel, "internal/"):
		return kindInternal
	case strings.HasPrefix(rel, "cmd/"):
		return kindCmd
	}
	return kindUnknown
}

// allowed reports whether package from may import package to (both
// relative to the module), and if not, why.
//
// Seams and internal leaves form the bottom together: a seam may import
// another seam or an internal leaf (transport runs its goroutines with
// internal/run), and an internal leaf may import a seam (internal/wal
// writes through vfs) — the seams are "usable by any of them", and they
// import no layer, so no path leads back up through them.
func allowed(from, to string) (bool, string) {
	kf, kt := classify(from), classify(to)
	switch {
	case kt == kindUnknown:
		return false, "the imported package is not placed in the layering"
	case kt == kindTop:
		return false, "nothing imports an example or a host-side test package"
	case kt == kindSim:
		return false, "nothing imports the simulator"
	case kt == kindCmd:
		return false, "nothing imports a command"
	case kt == kindListener && kf != kindTop && kf != kindCmd:
		return false, "only examples, commands and host-side tests import a listener: the core never pays for it"
	}
	switch kf {
	case kindTop:
		if kt == kindInternal {
			return false, "examples use the public packages only, as a host outside the module must"
		}
		return true, ""
	case kindChain:
		if kt == kindChain {
			if slices.Index(chain, to) <= slices.Index(chain, from) {
				return false, fmt.Sprintf("imports point down the chain %s", chainString())
			}
		}
		return true, ""
	case kindSeam:
		if kt == kindChain {
			return false, "a seam imports no layer, only other seams and internal leaves"
		}
		return true, ""
	case kindSim:
		if to == "" {
			return false, "the simulator drives the node engine (host), not the client API"
		}
		return true, ""
	case kindListener:
		if kt == kindInternal || kt == kindChain && to != "" {
			return false, "a listener uses the public client API only, as a host outside the module would"
		}
		return true, ""
	case kindInternal:
		if kt == kindChain {
			return false, "an internal leaf imports no layer, only seams and other internal leaves"
		}
		return true, ""
	case kindCmd:
		// A command is a host of the library built inside the module:
		// the offline tools read a data directory through internal
		// packages (read-only raft logs, the metadata log).
		return true, ""
	}
	return false, "the importing package is not placed in the layering"
}

func chainString() string {
	names := make([]string, len(chain))
	for i, c := range chain {
		names[i] = display(c)
	}
	return strings.Join(names, " → ")
}

func display(rel string) string {
	if rel == "" {
		return "parkway (root)"
	}
	return rel
}

// listedPackage is what the test reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Imports    []string
	Module     *struct {
		Path string
		Main bool
	}
	Error *struct{ Err string }
}

// listModule runs `go list -deps -json ./...` at the module root and
// returns the module's own packages (production imports only: a package's
// tests may import what its code may not) and the module path.
func listModule(t *testing.T) ([]listedPackage, string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available:", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(gobin, "list", "-deps", "-json", "./...")
	cmd.Dir = "../.." // this package is internal/layering
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []listedPackage
	module := ""
	dec := json.NewDecoder(&stdout)
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		if p.Module == nil || !p.Module.Main {
			continue // the standard library and other modules
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		module = p.Module.Path
		pkgs = append(pkgs, p)
	}
	if module == "" {
		t.Fatal("go list reported no package of the main module")
	}
	return pkgs, module
}

// relative returns path relative to module ("" for the root) and whether
// it is in the module.
func relative(module, path string) (string, bool) {
	if path == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// TestLayering fails on every import of a module package that points
// against the layering, and on every package the layering does not place.
func TestLayering(t *testing.T) {
	pkgs, module := listModule(t)
	found := map[string]bool{}
	edges := 0
	for _, p := range pkgs {
		from, _ := relative(module, p.ImportPath)
		found[from] = true
		if classify(from) == kindUnknown {
			t.Errorf("%s is not placed in the layering: add it to this test's table (and to DESIGN.md's Layering)", display(from))
			continue
		}
		for _, imp := range p.Imports {
			to, ok := relative(module, imp)
			if !ok {
				continue
			}
			edges++
			if ok, why := allowed(from, to); !ok {
				t.Errorf("%s (%s) imports %s (%s): %s", display(from), classify(from), display(to), classify(to), why)
			}
		}
	}
	// The table must keep matching the module: a renamed or moved layer
	// would otherwise leave its imports unchecked.
	for _, want := range slices.Concat(chain, seams, listeners, []string{sim}) {
		if !found[want] {
			t.Errorf("%s, named by the layering, is not a package of the module", display(want))
		}
	}
	t.Logf("%d packages, %d imports within the module checked", len(pkgs), edges)
}

// TestAllowed pins the rules on the edges that matter, so that a change of
// the table that lets one of them through is caught here too.
func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"examples/embed", "", true},
		{"examples/embed", "shard", true},
		{"examples/embed", "internal/run", false},
		{"", "host", true},
		{"", "internal/run", true},
		{"host", "", false},
		{"host", "reconciler", true},
		{"host", "metadata", true},
		{"reconciler", "shard", true},
		{"shard", "reconciler", false},
		{"router", "shard", false},
		{"partition", "router", false},
		{"metadata", "partition", false},
		{"metadata", "metadata", false},
		{"shard", "clock", true},
		{"clock", "shard", false},
		{"transport", "internal/run", true},
		{"vfs/errorfs", "vfs", true},
		{"metrics", "metadata", false},
		{"internal/wal", "vfs", true},
		{"internal/dedupe", "metadata", false},
		{"internal/run", "", false},
		{"internal/replica", "internal/wal", true},
		{"internal/sim", "host", true},
		{"internal/sim", "shard", true},
		{"internal/sim", "", false},
		{"host", "internal/sim", false},
		{"internal/run", "internal/sim", false},
		{"", "examples/embed", false},
		{"cmd/parkway", "internal/replica", true},
		{"cmd/parkway", "", true},
		{"host", "cmd/parkway", false},
		{"kafka", "", true},
		{"kafka", "metrics", true},
		{"kafka", "shard", false},
		{"kafka", "internal/run", false},
		{"", "kafka", false},
		{"host", "kafka", false},
		{"examples/kafka", "kafka", true},
		{"cmd/parkway", "kafka", true},
		{"shard", "newpkg", false},
		{"newpkg", "shard", false},
	} {
		if ok, why := allowed(c.from, c.to); ok != c.ok {
			t.Errorf("allowed(%s → %s) = %v (%s), want %v", display(c.from), display(c.to), ok, why, c.ok)
		}
	}
}

// listenerOnly are the modules only the Kafka listener needs (the
// protocol's messages and the record codecs): a host that does not
// import the listener must not link them.
var listenerOnly = []string{"github.com/twmb/franz-go", "github.com/klauspost/compress", "github.com/pierrec/lz4"}

// TestCoreDoesNotLinkListenerLibraries: no package of the layered chain
// or the seams depends, directly or through any other module, on a
// module only the listener needs, so a host that embeds a Node without
// the listener links none of them.
func TestCoreDoesNotLinkListenerLibraries(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available:", err)
	}
	var args []string
	for _, rel := range slices.Concat(chain, seams) {
		args = append(args, "./"+rel)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(gobin, append([]string{"list", "-deps"}, args...)...)
	cmd.Dir = "../.." // this package is internal/layering
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	n := 0
	for dep := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
		n++
		for _, m := range listenerOnly {
			if dep == m || strings.HasPrefix(dep, m+"/") {
				t.Errorf("the core links %s, which only the listener needs", dep)
			}
		}
	}
	t.Logf("%d packages the core links, none of %v", n, listenerOnly)
}
