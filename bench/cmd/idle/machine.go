package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// window is what one cluster's measurement window saw, for the machine
// baseline to be measured against.
type window struct {
	partitions     int
	rssKB, peakKB  int64   // resident set at the window's start, and the creation's peak
	cpuPct         float64 // the window's process CPU, % of one core
	switchesPerSec float64 // the window's context switches (all threads) per second
}

// kB parses a /proc/self/status figure ("1234 kB"); 0 when it is not one.
func kB(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(s, "kB")), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// machineBaseline measures, for each cluster's window, what this machine
// charges a process for the memory it holds, with no parkway in it: a
// child process (this command, -machine-hold) touches as many bytes as
// the cluster held resident, pointer-free so no collection has anything
// to mark, and then only wakes on a timer at the rate the cluster's
// threads were switched in, over a window as long as the cluster's (at
// most 30 s). A second child holds nothing and wakes the same way.
//
// Why: on a virtual machine a process's context switch can cost in
// proportion to the memory it has mapped (a hypervisor that shadows the
// guest's page tables pays for the address space it switches to, in time
// the guest's profilers never sample), and a first touch of a page costs
// a fault the hypervisor serves. Then an idle cluster's CPU grows with
// its resident set although its wakes do not, and a creation's CPU holds
// the faults of every page it touches. The two children tell that part,
// which is the machine's, from the part that is the cluster's own work,
// in the same run as the figures they are set against (as the compare
// command's raw fsync is beside case 6).
func machineBaseline(ws []window, measure time.Duration) error {
	if len(ws) == 0 {
		return nil
	}
	measure = min(measure, 30*time.Second)
	fmt.Printf("\nThe machine's charge for memory, in the same run: a child process that holds pointer-free memory resident and only wakes on a timer at the cluster's rate of context switches, over %v:\n\n", measure)
	fmt.Println("| partitions | cluster: resident set, context switches/s, idle CPU | child holding nothing: switches/s, CPU, per switch | child holding the cluster's resident set: switches/s, CPU, per switch | the cluster's switches at that child's cost per switch | first touch of the child's memory: CPU per GB | the cluster's peak resident set at that cost |")
	fmt.Println("| ---: | --- | --- | --- | ---: | ---: | ---: |")
	for _, w := range ws {
		setPhase("%d partitions: the machine baseline, a child holding nothing", w.partitions)
		empty, err := runChild(0, w.switchesPerSec, measure)
		if err != nil {
			return err
		}
		setPhase("%d partitions: the machine baseline, a child holding %d kB", w.partitions, w.rssKB)
		held, err := runChild(w.rssKB, w.switchesPerSec, measure)
		if err != nil {
			return err
		}
		perGB := held.touchCPU / (float64(w.rssKB) / (1 << 20))
		fmt.Printf("| %d | %.2f GB, %.0f/s, %.2f %% | %.0f/s, %.2f %%, %.0f µs | %.0f/s, %.2f %%, %.0f µs | %.2f %% | %.2f s | %.1f s |\n",
			w.partitions, float64(w.rssKB)/(1<<20), w.switchesPerSec, w.cpuPct,
			empty.switchesPerSec, empty.cpuPct, empty.perSwitchMicros(),
			held.switchesPerSec, held.cpuPct, held.perSwitchMicros(),
			w.switchesPerSec*held.perSwitchMicros()/1e4,
			perGB, perGB*float64(w.peakKB)/(1<<20))
	}
	return nil
}

// childResult is what a baseline child reports.
type childResult struct {
	touchCPU       float64 // seconds of CPU its first touch of the memory took
	cpuPct         float64 // its window's CPU, % of one core
	switchesPerSec float64
}

func (c childResult) perSwitchMicros() float64 {
	if c.switchesPerSec == 0 {
		return 0
	}
	return c.cpuPct * 1e4 / c.switchesPerSec
}

// runChild runs this command as a baseline child and reads its report.
func runChild(holdKB int64, wakes float64, measure time.Duration) (childResult, error) {
	cmd := exec.Command(os.Args[0], "-machine-hold", strconv.FormatInt(holdKB, 10),
		"-machine-wakes", strconv.FormatFloat(wakes, 'f', 1, 64), "-measure", measure.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return childResult{}, fmt.Errorf("machine baseline child: %w", err)
	}
	var r childResult
	if _, err := fmt.Sscanf(strings.TrimSpace(out.String()), "touch %g cpu %g switches %g", &r.touchCPU, &r.cpuPct, &r.switchesPerSec); err != nil {
		return childResult{}, fmt.Errorf("machine baseline child said %q: %w", out.String(), err)
	}
	return r, nil
}

// machineChild is the baseline child: it touches holdKB of pointer-free
// memory a page at a time (timing the faults), and then only sleeps and
// wakes, about wakes context switches a second, for the window,
// reporting its CPU and its context switches.
func machineChild(holdKB int64, wakes float64, measure time.Duration) error {
	c0, _ := processCPU()
	mem := make([]byte, holdKB<<10)
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	c1, _ := processCPU()
	// A timer's fire switches more than one thread in (the timer's, the
	// woken goroutine's, the runtime's monitor), so the ticker's rate is
	// calibrated until the child is switched in about as often as the
	// cluster was (wakes a second).
	rate := new(atomic.Int64)
	if wakes > 0 {
		rate.Store(int64(float64(time.Second) / wakes))
		go func() {
			for {
				time.Sleep(time.Duration(rate.Load()))
			}
		}()
		for range 5 {
			s0, _ := processSwitches()
			time.Sleep(time.Second)
			s1, _ := processSwitches()
			if got := float64(s1 - s0); got > 0 {
				rate.Store(int64(float64(rate.Load()) * got / wakes))
			}
		}
	}
	time.Sleep(time.Second)
	sw0, _ := processSwitches()
	c2, _ := processCPU()
	t0 := time.Now()
	time.Sleep(measure)
	c3, _ := processCPU()
	sw1, _ := processSwitches()
	wall := time.Since(t0)
	runtime.KeepAlive(mem)
	fmt.Printf("touch %g cpu %g switches %g\n", (c1 - c0).Seconds(), 100*float64(c3-c2)/float64(wall), float64(sw1-sw0)/wall.Seconds())
	return nil
}
