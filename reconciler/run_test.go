package reconciler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway/reconciler"
)

// DidWork is true when any count of the pass is non-zero, whatever the
// others are (two counts never cancel out), and false for a pass that only
// observed.
func TestReportDidWork(t *testing.T) {
	if (reconciler.Report{Revision: 7, Skipped: true, Parked: 3, Pending: 2}).DidWork() {
		t.Fatal("a pass that changed nothing did work")
	}
	set := []func(*reconciler.Report){
		func(r *reconciler.Report) { r.Built = 1 },
		func(r *reconciler.Report) { r.Removed = 1 },
		func(r *reconciler.Report) { r.RowsWritten = 1 },
		func(r *reconciler.Report) { r.Failed = 1 },
		func(r *reconciler.Report) { r.Answered = 1 },
		func(r *reconciler.Report) { r.Expired = 1 },
		func(r *reconciler.Report) { r.Reconfigured = 1 },
		func(r *reconciler.Report) { r.Retained = 1 },
	}
	for i := range set {
		var r reconciler.Report
		set[i](&r)
		if !r.DidWork() {
			t.Errorf("%+v: did no work", r)
		}
		if i+1 < len(set) {
			set[i+1](&r)
			if !r.DidWork() {
				t.Errorf("%+v: did no work", r)
			}
		}
	}
}

// failingPass is a Reconciler whose every pass fails; it counts passes and
// stops its Run after too many (a Run without pause would spin).
type failingPass struct {
	calls  atomic.Int64
	cancel context.CancelFunc
}

func (f *failingPass) Reconcile(context.Context) (reconciler.Report, error) {
	if f.calls.Add(1) > 100 {
		f.cancel()
	}
	return reconciler.Report{}, errors.New("pass failed")
}

// Run's zero arguments take their documented defaults: a nil clock is the
// wall clock (virtual inside the bubble), a nil logger is silent — a
// failing pass is logged to it, not a crash — and a non-positive period is
// DefaultPeriod, not passes without pause.
func TestRunDefaultsForNilAndNonPositiveArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, period := range []time.Duration{0, -time.Second} {
			ctx, cancel := context.WithCancel(context.Background())
			f := &failingPass{cancel: cancel}
			done := make(chan struct{})
			go func() {
				defer close(done)
				reconciler.Run(ctx, f, nil, nil, period, nil)
			}()
			time.Sleep(reconciler.DefaultPeriod / 2)
			if n := f.calls.Load(); n != 1 {
				t.Errorf("period %v: %d passes in half the default period, want 1", period, n)
			}
			time.Sleep(reconciler.DefaultPeriod)
			if n := f.calls.Load(); n != 2 {
				t.Errorf("period %v: %d passes in 1.5 default periods, want 2", period, n)
			}
			cancel()
			<-done
		}
	})
}
