package sim

// InvariantInfo is a registered invariant as the external tests see it.
type InvariantInfo struct {
	ID              int
	Name, Behaviour string
	Checks          string // the points it is checked at: step, settled, final, online
	CaughtBy        []string
	Uncaught        string
}

// Invariants lists the registry, in order.
func Invariants() []InvariantInfo {
	out := make([]InvariantInfo, 0, len(invariants))
	for _, inv := range invariants {
		var checks string
		for _, c := range []struct {
			name string
			on   bool
		}{{"step ", inv.step != nil}, {"settled ", inv.settled != nil}, {"final ", inv.final != nil}, {"online ", inv.online != ""}} {
			if c.on {
				checks += c.name
			}
		}
		out = append(out, InvariantInfo{ID: inv.id, Name: inv.name, Behaviour: inv.behaviour, Checks: checks,
			CaughtBy: inv.caughtBy, Uncaught: inv.uncaught})
	}
	return out
}
